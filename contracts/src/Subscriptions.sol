// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {EIP712} from "./EIP712.sol";
import {SignatureVerifier} from "./SignatureVerifier.sol";

/// @title ISubscriptionToken
/// @notice The subset of an ERC-20 (+ EIP-2612 with bytes signatures) token used by Subscriptions.
interface ISubscriptionToken {
    /// @notice ERC-20 balanceOf.
    /// @param account The account.
    /// @return The balance.
    function balanceOf(address account) external view returns (uint256);

    /// @notice ERC-20 allowance.
    /// @param owner The holder.
    /// @param spender The spender.
    /// @return The allowance.
    function allowance(address owner, address spender) external view returns (uint256);

    /// @notice ERC-20 transferFrom.
    /// @param from The holder.
    /// @param to The recipient.
    /// @param value The amount.
    /// @return success True on success.
    function transferFrom(address from, address to, uint256 value) external returns (bool success);

    /// @notice EIP-2612 permit, bytes-signature form (FiatToken v2.2).
    /// @param owner The holder and signer.
    /// @param spender The spender.
    /// @param value The allowance.
    /// @param deadline The last valid timestamp.
    /// @param signature The holder's signature.
    function permit(address owner, address spender, uint256 value, uint256 deadline, bytes memory signature)
        external;
}

/// @title Subscriptions
/// @notice Recurring payments with capped usage-based overage, paid from a subscriber's ERC-20
///         allowance to this contract (typically granted by an EIP-2612 permit).
/// @dev Invariants:
///      - Per billing cycle of a subscription, at most `plan.amount + maxOverage` is pulled from the
///        subscriber (`plan.amount` once, by first billing, `collect` or `resume`, and overage charges
///        while `overageUsed + amount <= maxOverage`; `maxOverage` can only be raised by the subscriber).
///      - A renewal (`collect`, `resume`) bills one cycle, which runs from the renewal's time: a
///        subscription renewed late, however many intervals late, pays one cycle and never the
///        intervals it was overdue.
///      - All funds pulled go to `plan.payTo`; this contract never holds funds.
///      - There is no owner, admin or other privileged role, and no function that moves a subscriber's
///        funds except first billing (`subscribe`, `subscribeWithSig`), renewal (`collect`, `resume`)
///        and `chargeOverage`.
///      - Nothing that changes a subscription can be called from inside one of this contract's
///        token calls (`ReentrantCall`): a renewal that fails undoes its effects, and nothing done
///        in between (an overage charge, a cancel) may survive or be overwritten by that undo.
///      States (uint8): 0 NONE (unknown id), 1 ACTIVE, 2 PAUSED, 3 CANCELLED (terminal).
///      Subscriber signatures are EIP-712 under the domain ("Tollgate Subscriptions", "1", chainId,
///      this contract) and share the per-subscriber `nonces` counter, which `subscribe` also advances.
///      ECDSA signatures with a high `s` or a `v` other than 27/28 are rejected; subscribers with
///      code are verified with EIP-1271.
contract Subscriptions is EIP712 {
    /// @notice A billing plan.
    /// @param provider The plan's creator; may deprecate it and charge overage.
    /// @param operator An account that may also deprecate the plan and charge overage (may be zero).
    /// @param token The ERC-20 token payments are made in.
    /// @param payTo The recipient of all payments.
    /// @param amount The amount billed per cycle.
    /// @param interval The cycle length in seconds.
    /// @param deprecated Whether new subscriptions are refused (existing ones keep renewing).
    struct Plan {
        address provider;
        address operator;
        address token;
        address payTo;
        uint256 amount;
        uint64 interval;
        bool deprecated;
    }

    /// @notice A subscription to a plan.
    /// @param planId The plan.
    /// @param subscriber The paying account.
    /// @param state 0 NONE, 1 ACTIVE, 2 PAUSED, 3 CANCELLED.
    /// @param cycle The last paid billing cycle (1 after first billing); missed intervals are not cycles.
    /// @param paidThrough The end (exclusive) of the paid period; the next cycle is due at this time
    ///        and, collected then or later, runs from its collection.
    /// @param maxOverage The cap on overage charges per cycle.
    /// @param overageUsed Overage charged in the current cycle.
    struct Subscription {
        bytes32 planId;
        address subscriber;
        uint8 state;
        uint32 cycle;
        uint64 paidThrough;
        uint256 maxOverage;
        uint256 overageUsed;
    }

    uint8 private constant STATE_NONE = 0;
    uint8 private constant STATE_ACTIVE = 1;
    uint8 private constant STATE_PAUSED = 2;
    uint8 private constant STATE_CANCELLED = 3;

    uint8 private constant ACTION_PAUSE = 1;
    uint8 private constant ACTION_RESUME = 2;
    uint8 private constant ACTION_CANCEL = 3;
    uint8 private constant ACTION_RAISE_ALLOWANCE = 4;

    /// @notice EIP-712 type hash of `Subscribe(bytes32 planId,address subscriber,uint256 maxOverage,uint256 nonce,uint256 deadline)`.
    bytes32 public constant SUBSCRIBE_TYPEHASH =
        keccak256("Subscribe(bytes32 planId,address subscriber,uint256 maxOverage,uint256 nonce,uint256 deadline)");

    /// @notice EIP-712 type hash of `Action(bytes32 id,uint8 action,uint256 value,uint256 nonce,uint256 deadline)`;
    ///         action 1 pause, 2 resume, 3 cancel, 4 raiseAllowance (value = new maxOverage, else 0).
    bytes32 public constant ACTION_TYPEHASH =
        keccak256("Action(bytes32 id,uint8 action,uint256 value,uint256 nonce,uint256 deadline)");

    /// @notice Plans by id (`planIdFor(provider, salt)`).
    mapping(bytes32 planId => Plan) public plans;

    /// @notice Subscriptions by id (`subscriptionIdFor(planId, subscriber, nonce)`).
    mapping(bytes32 id => Subscription) public subscriptions;

    /// @notice The next signature/subscription nonce of each subscriber.
    mapping(address subscriber => uint256) public nonces;

    /// @notice Whether the overage charge `keccak256(abi.encode(id, ref))` was applied.
    mapping(bytes32 key => bool) public chargeApplied;

    /// @notice Emitted when a plan is created.
    /// @param planId The plan id.
    /// @param provider The plan's creator.
    /// @param token The payment token.
    /// @param payTo The payment recipient.
    /// @param amount The amount per cycle.
    /// @param interval The cycle length in seconds.
    /// @param operator The plan's operator (may be zero).
    event PlanCreated(
        bytes32 indexed planId,
        address indexed provider,
        address token,
        address payTo,
        uint256 amount,
        uint64 interval,
        address operator
    );

    /// @notice Emitted when a plan is deprecated (once).
    /// @param planId The plan id.
    event PlanRetired(bytes32 indexed planId);

    /// @notice Emitted when a subscription is created (followed by SubscriptionRenewed for cycle 1).
    /// @param id The subscription id.
    /// @param planId The plan id.
    /// @param subscriber The subscriber.
    /// @param maxOverage The overage cap per cycle.
    /// @param paidThrough The end of the first paid cycle.
    event SubscriptionCreated(
        bytes32 indexed id, bytes32 indexed planId, address indexed subscriber, uint256 maxOverage, uint64 paidThrough
    );

    /// @notice Emitted when a cycle is paid.
    /// @param id The subscription id.
    /// @param cycle The cycle paid.
    /// @param amount The amount pulled.
    /// @param paidThrough The new end of the paid period.
    event SubscriptionRenewed(bytes32 indexed id, uint32 cycle, uint256 amount, uint64 paidThrough);

    /// @notice Emitted when `collect` could not pull the payment for `cycle` (the subscription is paused).
    /// @param id The subscription id.
    /// @param cycle The cycle that could not be collected.
    event RenewalFailed(bytes32 indexed id, uint32 cycle);

    /// @notice Emitted when a subscription becomes PAUSED.
    /// @param id The subscription id.
    event SubscriptionPaused(bytes32 indexed id);

    /// @notice Emitted when a subscription is resumed.
    /// @param id The subscription id.
    /// @param paidThrough The end of the paid period after resuming.
    event SubscriptionResumed(bytes32 indexed id, uint64 paidThrough);

    /// @notice Emitted when a subscription is cancelled.
    /// @param id The subscription id.
    event SubscriptionCancelled(bytes32 indexed id);

    /// @notice Emitted when the subscriber raises the overage cap.
    /// @param id The subscription id.
    /// @param maxOverage The new cap.
    event AllowanceRaised(bytes32 indexed id, uint256 maxOverage);

    /// @notice Emitted when overage is charged.
    /// @param id The subscription id.
    /// @param cycle The current cycle.
    /// @param amount The amount charged.
    /// @param used The overage used in this cycle, including `amount`.
    /// @param ref The provider's reference for the charge (idempotency key).
    event OverageCharged(bytes32 indexed id, uint32 cycle, uint256 amount, uint256 used, bytes32 ref);

    /// @notice A plan with this id already exists.
    /// @param planId The plan id.
    error PlanExists(bytes32 planId);

    /// @notice Plan parameters are invalid (zero token or payTo, zero amount or interval).
    error InvalidPlan();

    /// @notice No plan has this id.
    /// @param planId The plan id.
    error UnknownPlan(bytes32 planId);

    /// @notice The plan is deprecated and accepts no new subscriptions.
    /// @param planId The plan id.
    error PlanDeprecated(bytes32 planId);

    /// @notice `caller` may not perform this action.
    /// @param caller The caller.
    error Unauthorized(address caller);

    /// @notice The signature's deadline has passed.
    /// @param deadline The deadline.
    error SignatureExpired(uint256 deadline);

    /// @notice The signature is malformed, non-canonical, or not by the subscriber.
    error InvalidSignature();

    /// @notice `account` holds `balance`, less than the `needed` amount.
    /// @param account The subscriber.
    /// @param balance Its token balance.
    /// @param needed The amount required.
    error InsufficientFunds(address account, uint256 balance, uint256 needed);

    /// @notice `spender` (this contract) is allowed `allowance`, less than the `needed` amount.
    /// @param spender This contract.
    /// @param allowance Its allowance from the subscriber.
    /// @param needed The amount required.
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);

    /// @notice No subscription has this id.
    /// @param id The subscription id.
    error UnknownSubscription(bytes32 id);

    /// @notice The subscription is not in a state that allows this action.
    /// @param id The subscription id.
    /// @param state Its current state.
    error SubscriptionNotActive(bytes32 id, uint8 state);

    /// @notice The cycle given is not the one expected.
    /// @param id The subscription id.
    /// @param expected The expected cycle.
    error WrongCycle(bytes32 id, uint32 expected);

    /// @notice The next cycle is not due before `paidThrough`.
    /// @param id The subscription id.
    /// @param paidThrough The time the next cycle is due.
    error NotDue(bytes32 id, uint64 paidThrough);

    /// @notice The new overage cap is not above the current one.
    /// @param current The current cap.
    /// @param requested The requested cap.
    error AllowanceNotRaised(uint256 current, uint256 requested);

    /// @notice This overage charge was already applied.
    /// @param id The subscription id.
    /// @param ref The charge reference.
    error ChargeAlreadyApplied(bytes32 id, bytes32 ref);

    /// @notice The charge exceeds the overage remaining in this cycle.
    /// @param id The subscription id.
    /// @param remaining The overage remaining.
    error AllowanceExhausted(bytes32 id, uint256 remaining);

    /// @notice An overage charge of zero was requested.
    error ZeroAmount();

    /// @notice The token's transferFrom failed although balance and allowance sufficed.
    error TransferFailed();

    /// @notice `collect` ran out of gas inside the token call; retry with more gas.
    error InsufficientGas();

    /// @notice A call into this contract from inside one of its own token calls (a plan token's
    ///         `transferFrom` or `permit`), refused: e.g. an overage charged from inside a renewal
    ///         that then fails would survive the renewal's undo, over the cycle's cap.
    error ReentrantCall();

    /// @dev Set while a token call is in flight (transient: cleared after every transaction).
    bool private transient _inTokenCall;

    /// @dev Refuses re-entry from a token call into anything that changes a subscription.
    modifier notFromTokenCall() {
        if (_inTokenCall) revert ReentrantCall();
        _;
    }

    constructor() EIP712("Tollgate Subscriptions", "1") {}

    // ---------------------------------------------------------------- views

    /// @notice The EIP-712 domain separator for the current chain.
    /// @return The domain separator.
    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparator();
    }

    /// @notice The id of the plan `provider` creates with `salt`.
    /// @param provider The plan's creator.
    /// @param salt The creator's salt.
    /// @return `keccak256(abi.encode(provider, salt))`.
    function planIdFor(address provider, bytes32 salt) public pure returns (bytes32) {
        return keccak256(abi.encode(provider, salt));
    }

    /// @notice The id of the subscription of `subscriber` to `planId` created with `nonce`.
    /// @param planId The plan id.
    /// @param subscriber The subscriber.
    /// @param nonce The subscriber's nonce consumed by the subscription.
    /// @return `keccak256(abi.encode(planId, subscriber, nonce))`.
    function subscriptionIdFor(bytes32 planId, address subscriber, uint256 nonce) public pure returns (bytes32) {
        return keccak256(abi.encode(planId, subscriber, nonce));
    }

    /// @notice A subscription's state and paid-through time; (0, 0) for unknown ids.
    /// @param id The subscription id.
    /// @return state 0 NONE, 1 ACTIVE, 2 PAUSED, 3 CANCELLED.
    /// @return paidThrough The end of the paid period.
    function status(bytes32 id) external view returns (uint8 state, uint64 paidThrough) {
        Subscription storage sub = subscriptions[id];
        return (sub.state, sub.paidThrough);
    }

    /// @notice The overage that may still be charged in the current cycle (0 for unknown ids).
    /// @param id The subscription id.
    /// @return `maxOverage - overageUsed`.
    function remainingAllowance(bytes32 id) external view returns (uint256) {
        Subscription storage sub = subscriptions[id];
        return sub.maxOverage - sub.overageUsed;
    }

    // ---------------------------------------------------------------- plans

    /// @notice Creates a plan owned by the caller.
    /// @param token The payment token.
    /// @param payTo The payment recipient (non-zero, not this contract).
    /// @param amount The amount per cycle (non-zero).
    /// @param interval The cycle length in seconds (non-zero).
    /// @param operator An account that may also deprecate the plan and charge overage (may be zero).
    /// @param salt Any value making the id unique for the caller.
    /// @return planId `planIdFor(msg.sender, salt)`.
    function createPlan(
        address token,
        address payTo,
        uint256 amount,
        uint64 interval,
        address operator,
        bytes32 salt
    ) external returns (bytes32 planId) {
        planId = planIdFor(msg.sender, salt);
        if (plans[planId].provider != address(0)) revert PlanExists(planId);
        if (token == address(0) || payTo == address(0) || payTo == address(this) || amount == 0 || interval == 0) {
            revert InvalidPlan();
        }
        plans[planId] = Plan({
            provider: msg.sender,
            operator: operator,
            token: token,
            payTo: payTo,
            amount: amount,
            interval: interval,
            deprecated: false
        });
        emit PlanCreated(planId, msg.sender, token, payTo, amount, interval, operator);
    }

    /// @notice Refuses new subscriptions to a plan; existing subscriptions keep renewing.
    ///         Only the provider or operator may call it. Idempotent: deprecating a deprecated plan
    ///         succeeds without emitting PlanRetired again.
    /// @param planId The plan id.
    function deprecatePlan(bytes32 planId) external {
        Plan storage plan = plans[planId];
        if (plan.provider == address(0)) revert UnknownPlan(planId);
        if (msg.sender != plan.provider && msg.sender != plan.operator) revert Unauthorized(msg.sender);
        if (plan.deprecated) return;
        plan.deprecated = true;
        emit PlanRetired(planId);
    }

    // ---------------------------------------------------------------- subscribing

    /// @notice Subscribes the caller to a plan and pays the first cycle.
    /// @dev The caller must have approved this contract for at least `plan.amount` of the plan token.
    /// @param planId The plan id.
    /// @param maxOverage The cap on overage charges per cycle.
    /// @return id `subscriptionIdFor(planId, msg.sender, nonce)` with the caller's consumed nonce.
    function subscribe(bytes32 planId, uint256 maxOverage) external notFromTokenCall returns (bytes32 id) {
        Plan storage plan = _requireOpenPlan(planId);
        uint256 nonce = nonces[msg.sender]++;
        id = subscriptionIdFor(planId, msg.sender, nonce);
        _open(id, planId, plan, msg.sender, maxOverage);
    }

    /// @notice Subscribes `subscriber` to a plan with its EIP-712 `Subscribe` signature, optionally
    ///         applying its EIP-2612 permit first, and pays the first cycle. Anyone may submit.
    /// @dev The permit is attempted with try/catch so that a front-run permit cannot block the
    ///      subscription; the allowance check that follows decides.
    /// @param planId The plan id.
    /// @param subscriber The subscriber and signer.
    /// @param maxOverage The cap on overage charges per cycle.
    /// @param deadline The last timestamp at which the signature is valid.
    /// @param signature The subscriber's `Subscribe` signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    /// @param permitValue The permit's allowance value.
    /// @param permitDeadline The permit's deadline.
    /// @param permitSignature The permit signature; empty to skip the permit.
    /// @return id `subscriptionIdFor(planId, subscriber, nonce)` with the signed nonce.
    function subscribeWithSig(
        bytes32 planId,
        address subscriber,
        uint256 maxOverage,
        uint256 deadline,
        bytes calldata signature,
        uint256 permitValue,
        uint256 permitDeadline,
        bytes calldata permitSignature
    ) external notFromTokenCall returns (bytes32 id) {
        Plan storage plan = _requireOpenPlan(planId);
        uint256 nonce = _useSubscribeSignature(planId, subscriber, maxOverage, deadline, signature);
        if (permitSignature.length > 0) {
            _tryPermit(plan.token, subscriber, permitValue, permitDeadline, permitSignature);
        }
        id = subscriptionIdFor(planId, subscriber, nonce);
        _open(id, planId, plan, subscriber, maxOverage);
    }

    // ---------------------------------------------------------------- billing

    /// @notice Collects the next cycle of a due subscription. Anyone may call (keepers).
    ///         The new cycle starts at the renewal: `paidThrough = block.timestamp + interval`,
    ///         and a renewal is never before the old `paidThrough` (NotDue). On time, that
    ///         continues the paid period; late (a keeper down or a relayer out of gas, for one
    ///         interval or ten), it bills one cycle from now and nothing for the time in between,
    ///         when the subscription was overdue (refused from `paidThrough` on), as `resume`
    ///         does. So a renewal never bills a backlog: the next cycle is due an interval later.
    /// @dev Never reverts because of the subscriber's funds: if the payment cannot be pulled the
    ///      subscription is paused (RenewalFailed, SubscriptionPaused) and false is returned.
    ///      A retried collect for an already-billed cycle reverts with WrongCycle. `cycle` counts
    ///      the cycles billed, not the intervals elapsed: missed intervals take no cycle number.
    /// @param id The subscription id.
    /// @param cycle The cycle to collect; must be the current cycle + 1.
    /// @return collected True if the payment was pulled, false if the subscription was paused.
    function collect(bytes32 id, uint32 cycle) external notFromTokenCall returns (bool collected) {
        Subscription storage sub = _requireSubscription(id);
        uint8 state = sub.state;
        if (state != STATE_ACTIVE) revert SubscriptionNotActive(id, state);
        uint32 expected = sub.cycle + 1;
        if (cycle != expected) revert WrongCycle(id, expected);
        uint64 paidThrough = sub.paidThrough;
        if (block.timestamp < paidThrough) revert NotDue(id, paidThrough);

        Plan storage plan = plans[sub.planId];
        address token = plan.token;
        address subscriber = sub.subscriber;
        uint256 amount = plan.amount;
        if (_canPull(token, subscriber, amount)) {
            uint256 overageUsed = sub.overageUsed;
            // From the renewal's time (>= paidThrough), never from paidThrough: see above.
            uint64 newPaidThrough = uint64(block.timestamp) + plan.interval;
            // Effects before the interaction; undone below if the token call fails.
            sub.cycle = cycle;
            sub.paidThrough = newPaidThrough;
            sub.overageUsed = 0;
            uint256 gasBefore = gasleft();
            if (_callTransferFrom(token, subscriber, plan.payTo, amount)) {
                emit SubscriptionRenewed(id, cycle, amount, newPaidThrough);
                return true;
            }
            // A keeper must not be able to pause a subscription by starving the token call of gas.
            if (gasleft() <= gasBefore / 64) revert InsufficientGas();
            sub.cycle = expected - 1;
            sub.paidThrough = paidThrough;
            sub.overageUsed = overageUsed;
        }
        sub.state = STATE_PAUSED;
        emit RenewalFailed(id, cycle);
        emit SubscriptionPaused(id);
        return false;
    }

    /// @notice Charges usage overage for the current cycle, up to the subscriber's cap.
    ///         Only the plan's provider or operator may call it. A paused or cancelled
    ///         subscription can still be charged for its last cycle (usage metered before the
    ///         subscriber paused or cancelled is owed), within the same per-cycle cap; the cycle
    ///         never advances again, so this is bounded by one cap.
    /// @param id The subscription id.
    /// @param cycle The current cycle (so a late batch cannot consume the next cycle's cap).
    /// @param amount The amount to charge (non-zero).
    /// @param ref The provider's unique reference for this charge (idempotency key).
    function chargeOverage(bytes32 id, uint32 cycle, uint256 amount, bytes32 ref) external notFromTokenCall {
        Subscription storage sub = _requireSubscription(id);
        Plan storage plan = plans[sub.planId];
        if (msg.sender != plan.provider && msg.sender != plan.operator) revert Unauthorized(msg.sender);
        if (cycle != sub.cycle) revert WrongCycle(id, sub.cycle);
        bytes32 key = keccak256(abi.encode(id, ref));
        if (chargeApplied[key]) revert ChargeAlreadyApplied(id, ref);
        if (amount == 0) revert ZeroAmount();
        uint256 used = sub.overageUsed;
        uint256 remaining = sub.maxOverage - used;
        if (amount > remaining) revert AllowanceExhausted(id, remaining);
        unchecked {
            used += amount;
        }
        chargeApplied[key] = true;
        sub.overageUsed = used;
        _pull(plan.token, sub.subscriber, plan.payTo, amount);
        emit OverageCharged(id, cycle, amount, used, ref);
    }

    // ---------------------------------------------------------------- subscriber actions

    /// @notice Pauses an ACTIVE subscription. Only the subscriber.
    /// @param id The subscription id.
    function pause(bytes32 id) external notFromTokenCall {
        _pause(id, _requireSubscriber(id));
    }

    /// @notice Resumes a PAUSED subscription. Only the subscriber. If the next cycle is due, it is
    ///         paid first (reverting if it cannot be) and a new cycle starts now.
    /// @param id The subscription id.
    function resume(bytes32 id) external notFromTokenCall {
        _resume(id, _requireSubscriber(id));
    }

    /// @notice Cancels an ACTIVE or PAUSED subscription for good. Only the subscriber.
    /// @param id The subscription id.
    function cancel(bytes32 id) external notFromTokenCall {
        _cancel(id, _requireSubscriber(id));
    }

    /// @notice Raises the overage cap of a non-cancelled subscription. Only the subscriber.
    /// @param id The subscription id.
    /// @param newMaxOverage The new cap; must exceed the current one.
    function raiseAllowance(bytes32 id, uint256 newMaxOverage) external notFromTokenCall {
        _raiseAllowance(id, _requireSubscriber(id), newMaxOverage);
    }

    /// @notice `pause` with the subscriber's EIP-712 `Action` signature (action 1, value 0). Anyone may submit.
    /// @param id The subscription id.
    /// @param deadline The last timestamp at which the signature is valid.
    /// @param signature The subscriber's signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    function pauseWithSig(bytes32 id, uint256 deadline, bytes calldata signature) external notFromTokenCall {
        Subscription storage sub = _requireSubscription(id);
        _useActionSignature(id, sub.subscriber, ACTION_PAUSE, 0, deadline, signature);
        _pause(id, sub);
    }

    /// @notice `resume` with the subscriber's EIP-712 `Action` signature (action 2, value 0). Anyone may submit.
    /// @param id The subscription id.
    /// @param deadline The last timestamp at which the signature is valid.
    /// @param signature The subscriber's signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    function resumeWithSig(bytes32 id, uint256 deadline, bytes calldata signature) external notFromTokenCall {
        Subscription storage sub = _requireSubscription(id);
        _useActionSignature(id, sub.subscriber, ACTION_RESUME, 0, deadline, signature);
        _resume(id, sub);
    }

    /// @notice `cancel` with the subscriber's EIP-712 `Action` signature (action 3, value 0). Anyone may submit.
    /// @param id The subscription id.
    /// @param deadline The last timestamp at which the signature is valid.
    /// @param signature The subscriber's signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    function cancelWithSig(bytes32 id, uint256 deadline, bytes calldata signature) external notFromTokenCall {
        Subscription storage sub = _requireSubscription(id);
        _useActionSignature(id, sub.subscriber, ACTION_CANCEL, 0, deadline, signature);
        _cancel(id, sub);
    }

    /// @notice `raiseAllowance` with the subscriber's EIP-712 `Action` signature (action 4,
    ///         value = newMaxOverage). Anyone may submit.
    /// @param id The subscription id.
    /// @param newMaxOverage The new cap; must exceed the current one.
    /// @param deadline The last timestamp at which the signature is valid.
    /// @param signature The subscriber's signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    function raiseAllowanceWithSig(bytes32 id, uint256 newMaxOverage, uint256 deadline, bytes calldata signature)
        external
        notFromTokenCall
    {
        Subscription storage sub = _requireSubscription(id);
        _useActionSignature(id, sub.subscriber, ACTION_RAISE_ALLOWANCE, newMaxOverage, deadline, signature);
        _raiseAllowance(id, sub, newMaxOverage);
    }

    // ---------------------------------------------------------------- internals

    function _requireOpenPlan(bytes32 planId) private view returns (Plan storage plan) {
        plan = plans[planId];
        if (plan.provider == address(0)) revert UnknownPlan(planId);
        if (plan.deprecated) revert PlanDeprecated(planId);
    }

    function _requireSubscription(bytes32 id) private view returns (Subscription storage sub) {
        sub = subscriptions[id];
        if (sub.state == STATE_NONE) revert UnknownSubscription(id);
    }

    function _requireSubscriber(bytes32 id) private view returns (Subscription storage sub) {
        sub = _requireSubscription(id);
        if (msg.sender != sub.subscriber) revert Unauthorized(msg.sender);
    }

    /// @dev Stores a new ACTIVE subscription, pulls the first cycle and emits its events.
    function _open(bytes32 id, bytes32 planId, Plan storage plan, address subscriber, uint256 maxOverage) private {
        uint256 amount = plan.amount;
        uint64 paidThrough = uint64(block.timestamp) + plan.interval;
        Subscription storage sub = subscriptions[id];
        sub.planId = planId;
        sub.subscriber = subscriber;
        sub.state = STATE_ACTIVE;
        sub.cycle = 1;
        sub.paidThrough = paidThrough;
        sub.maxOverage = maxOverage;
        _pull(plan.token, subscriber, plan.payTo, amount);
        emit SubscriptionCreated(id, planId, subscriber, maxOverage, paidThrough);
        emit SubscriptionRenewed(id, 1, amount, paidThrough);
    }

    function _pause(bytes32 id, Subscription storage sub) private {
        if (sub.state != STATE_ACTIVE) revert SubscriptionNotActive(id, sub.state);
        sub.state = STATE_PAUSED;
        emit SubscriptionPaused(id);
    }

    function _resume(bytes32 id, Subscription storage sub) private {
        if (sub.state != STATE_PAUSED) revert SubscriptionNotActive(id, sub.state);
        sub.state = STATE_ACTIVE;
        uint64 paidThrough = sub.paidThrough;
        if (block.timestamp >= paidThrough) {
            Plan storage plan = plans[sub.planId];
            uint32 cycle = sub.cycle + 1;
            uint256 amount = plan.amount;
            paidThrough = uint64(block.timestamp) + plan.interval;
            sub.cycle = cycle;
            sub.paidThrough = paidThrough;
            sub.overageUsed = 0;
            _pull(plan.token, sub.subscriber, plan.payTo, amount);
            emit SubscriptionRenewed(id, cycle, amount, paidThrough);
        }
        emit SubscriptionResumed(id, paidThrough);
    }

    function _cancel(bytes32 id, Subscription storage sub) private {
        uint8 state = sub.state;
        if (state != STATE_ACTIVE && state != STATE_PAUSED) revert SubscriptionNotActive(id, state);
        sub.state = STATE_CANCELLED;
        emit SubscriptionCancelled(id);
    }

    function _raiseAllowance(bytes32 id, Subscription storage sub, uint256 newMaxOverage) private {
        if (sub.state == STATE_CANCELLED) revert SubscriptionNotActive(id, STATE_CANCELLED);
        uint256 current = sub.maxOverage;
        if (newMaxOverage <= current) revert AllowanceNotRaised(current, newMaxOverage);
        sub.maxOverage = newMaxOverage;
        emit AllowanceRaised(id, newMaxOverage);
    }

    /// @dev Verifies a `Subscribe` signature and consumes the subscriber's nonce, which it returns.
    function _useSubscribeSignature(
        bytes32 planId,
        address subscriber,
        uint256 maxOverage,
        uint256 deadline,
        bytes calldata signature
    ) private returns (uint256 nonce) {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        nonce = nonces[subscriber];
        bytes32 digest =
            _hashTypedData(keccak256(abi.encode(SUBSCRIBE_TYPEHASH, planId, subscriber, maxOverage, nonce, deadline)));
        if (!SignatureVerifier.isValidNow(subscriber, digest, signature)) revert InvalidSignature();
        nonces[subscriber] = nonce + 1;
    }

    /// @dev Verifies an `Action` signature and consumes the subscriber's nonce.
    function _useActionSignature(
        bytes32 id,
        address subscriber,
        uint8 action,
        uint256 value,
        uint256 deadline,
        bytes calldata signature
    ) private {
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
        uint256 nonce = nonces[subscriber];
        bytes32 digest = _hashTypedData(keccak256(abi.encode(ACTION_TYPEHASH, id, action, value, nonce, deadline)));
        if (!SignatureVerifier.isValidNow(subscriber, digest, signature)) revert InvalidSignature();
        nonces[subscriber] = nonce + 1;
    }

    /// @dev Applies the subscriber's permit, ignoring failure (e.g. it was already used by a front-runner).
    function _tryPermit(address token, address subscriber, uint256 value, uint256 deadline, bytes calldata signature)
        private
    {
        _inTokenCall = true;
        try ISubscriptionToken(token).permit(subscriber, address(this), value, deadline, signature) {} catch {}
        _inTokenCall = false;
    }

    /// @dev Whether `from` has the balance and allowance for a pull of `amount`.
    function _canPull(address token, address from, uint256 amount) private view returns (bool) {
        return ISubscriptionToken(token).balanceOf(from) >= amount
            && ISubscriptionToken(token).allowance(from, address(this)) >= amount;
    }

    /// @dev Pulls `amount` from `from` to `to`, reverting with InsufficientFunds, InsufficientAllowance
    ///      or TransferFailed if it cannot.
    function _pull(address token, address from, address to, uint256 amount) private {
        uint256 balance = ISubscriptionToken(token).balanceOf(from);
        if (balance < amount) revert InsufficientFunds(from, balance, amount);
        uint256 allowed = ISubscriptionToken(token).allowance(from, address(this));
        if (allowed < amount) revert InsufficientAllowance(address(this), allowed, amount);
        if (!_callTransferFrom(token, from, to, amount)) revert TransferFailed();
    }

    /// @dev Calls `token.transferFrom(from, to, amount)` without reverting. Succeeds if the call did
    ///      not revert and returned `true`, or returned nothing from a contract (non-standard tokens).
    ///      At most 32 bytes of return data are copied.
    function _callTransferFrom(address token, address from, address to, uint256 amount) private returns (bool ok) {
        bytes memory data = abi.encodeCall(ISubscriptionToken.transferFrom, (from, to, amount));
        _inTokenCall = true;
        assembly ("memory-safe") {
            ok := call(gas(), token, 0, add(data, 0x20), mload(data), 0x00, 0x20)
            if ok {
                switch returndatasize()
                case 0 { ok := gt(extcodesize(token), 0) }
                default { ok := and(gt(returndatasize(), 31), eq(mload(0x00), 1)) }
            }
        }
        _inTokenCall = false;
    }
}
