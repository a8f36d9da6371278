// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Checks, Vm} from "./Base.sol";
import {Subscriptions} from "src/Subscriptions.sol";

/// @dev What the handlers need of a token (the project's Token and FiatToken v2.2 both have it);
///      the handler must be allowed to mint.
interface IToken {
    function balanceOf(address) external view returns (uint256);
    function allowance(address, address) external view returns (uint256);
    function approve(address, uint256) external returns (bool);
    function transfer(address, uint256) external returns (bool);
    function mint(address, uint256) external;
    function nonces(address) external view returns (uint256);
    function authorizationState(address, bytes32) external view returns (bool);
    function DOMAIN_SEPARATOR() external view returns (bytes32);
}

/// @dev Drives every external function of Subscriptions with subscribers (with keys), plan
///      providers and operators, a relayer, an attacker with no rights, and time jumps; after each
///      call compares the subscriptions and every party's balance before and after, and records a
///      breach of each invariant (see SubscriptionsInvariants).
contract SubscriptionsHandler is Checks {
    // Invariant indices (SubscriptionsInvariants names them).
    uint256 internal constant CAP = 0; // <= amount + maxOverage per subscription per cycle
    uint256 internal constant ONLY_PAYTO = 1; // funds go only to the plan's payTo
    uint256 internal constant NOT_BEFORE_DUE = 2; // a cycle is billed only from paidThrough on
    uint256 internal constant ONCE_PER_CYCLE = 3; // each cycle billed once, exactly plan.amount
    uint256 internal constant AFTER_CANCEL = 4; // a cancelled subscription never renews or changes
    uint256 internal constant PAUSE_RESUME = 5; // pause/resume neither skip nor double-bill
    uint256 internal constant ONLY_SUBSCRIBER = 6; // only the subscriber's tx/signature changes it
    uint256 internal constant DEPRECATED = 7; // a deprecated plan takes no new subscriber
    uint256 internal constant EVENTS = 8; // pulls == what the events report
    uint256 internal constant HOLDS_NOTHING = 9; // the contract never holds tokens
    uint256 internal constant OUTSIDER = 10; // no outsider call moves a third party's funds
    uint256 internal constant NO_PANIC = 11; // no call ends in a panic code
    uint256 internal constant LIVENESS = 12; // calls the rules allow go through

    uint8 internal constant NONE = 0;
    uint8 internal constant ACTIVE = 1;
    uint8 internal constant PAUSED = 2;
    uint8 internal constant CANCELLED = 3;

    enum Op {
        Plan,
        Subscribe,
        Collect,
        Charge,
        Action
    }

    struct Snap {
        uint8 state;
        uint32 cycle;
        uint64 paidThrough;
        uint256 maxOverage;
        uint256 overageUsed;
    }

    struct PlanView {
        address provider;
        address operator;
        address payTo;
        uint256 amount;
        uint64 interval;
        bool deprecated;
    }

    Subscriptions public immutable subs;
    IToken public immutable token;

    uint256[3] internal subscriberKeys;
    address[3] public subscribers;
    address[2] public providers;
    address public immutable operator;
    address public immutable relayer;
    uint256 internal immutable attackerKey;
    address public immutable attacker;
    address public immutable sink;

    bytes32[] public planIds;
    bytes32[] public subIds;
    address[] internal parties;

    mapping(bytes32 id => mapping(uint32 cycle => uint256)) public pulledInCycle;
    mapping(bytes32 id => mapping(uint32 cycle => bool)) public billed;
    mapping(bytes32 id => uint32) public bills;
    /// @dev The last signature the subscriber's relayer used on each subscription (for replays).
    mapping(bytes32 id => bytes) internal lastSig;
    mapping(bytes32 id => uint8) internal lastAction;
    mapping(bytes32 id => uint256) internal lastValue;
    mapping(bytes32 id => uint256) internal lastDeadline;

    uint256 public ghostPulled;
    uint256 public ghostReported;
    uint256 public calls;
    /// @dev The gas the next call gets (0: all): a keeper starving collect's token call.
    uint256 internal gasCap;
    /// @dev Successful calls per Subscriptions selector (the reachability test reads it).
    mapping(bytes4 selector => uint256) public succeeded;

    constructor(Subscriptions subs_, IToken token_) {
        subs = subs_;
        token = token_;
        for (uint256 i = 0; i < 3; i++) {
            subscriberKeys[i] = 0xA11CE + i;
            subscribers[i] = vm.addr(subscriberKeys[i]);
            vm.label(subscribers[i], string.concat("subscriber", vm.toString(i)));
            parties.push(subscribers[i]);
        }
        providers[0] = address(0xB0B0);
        providers[1] = address(0xB0B1);
        operator = address(0x0BE7);
        relayer = address(0x7E1A);
        attackerKey = 0xBAD;
        attacker = vm.addr(attackerKey);
        sink = address(0x5111C);
        vm.label(attacker, "attacker");
        parties.push(providers[0]);
        parties.push(providers[1]);
        parties.push(operator);
        parties.push(relayer);
        parties.push(attacker);
        parties.push(address(subs_));
    }

    // ------------------------------------------------------------------ setup actions

    function warp(uint256 secs) external {
        callNote = "warp";
        vm.warp(block.timestamp + _bound(secs, 0, 40 days));
    }

    function fund(uint256 who, uint256 amount) external {
        callNote = "fund";
        amount = _bound(amount, 0, 1e12);
        if (amount > 0) token.mint(subscribers[who % 3], amount); // FiatToken refuses to mint 0
    }

    function approveSubs(uint256 who, uint256 amount) external {
        callNote = "approve";
        amount = amount % 4 == 0 ? type(uint256).max : _bound(amount, 0, 1e10);
        vm.prank(subscribers[who % 3]);
        token.approve(address(subs), amount);
    }

    /// @dev A subscriber spends money elsewhere, so later pulls can fail.
    function drain(uint256 who, uint256 amount) external {
        callNote = "drain";
        address s = subscribers[who % 3];
        uint256 bal = token.balanceOf(s);
        amount = _bound(amount, 0, bal);
        vm.prank(s);
        token.transfer(sink, amount);
    }

    // ------------------------------------------------------------------ plans

    function createPlan(uint256 providerSeed, uint256 amount, uint256 interval, bool withOperator, bytes32 salt)
        external
    {
        if (planIds.length >= 6) return;
        address provider = providers[providerSeed % 2];
        // A fresh payTo per plan, so every payment can be attributed to its plan.
        address payTo = address(uint160(0xFA70 + planIds.length));
        amount = _bound(amount, 1, 100e6);
        uint64 iv = uint64(_bound(interval, 1, 30 days));
        bytes32 planId = subs.planIdFor(provider, salt);
        callNote = "createPlan";
        (bool ok,) = _exec(
            Op.Plan,
            provider,
            bytes32(0),
            false,
            abi.encodeCall(
                Subscriptions.createPlan,
                (address(token), payTo, amount, iv, withOperator ? operator : address(0), salt)
            )
        );
        if (ok) {
            planIds.push(planId);
            parties.push(payTo);
        }
    }

    function deprecatePlan(uint256 planSeed, uint256 callerSeed) external {
        if (planIds.length == 0) return;
        bytes32 planId = planIds[planSeed % planIds.length];
        PlanView memory p = _plan(planId);
        address caller = _pick(callerSeed, p, address(0));
        callNote = "deprecatePlan";
        (bool ok,) = _exec(Op.Plan, caller, bytes32(0), false, abi.encodeCall(Subscriptions.deprecatePlan, (planId)));
        bool allowed = caller == p.provider || (caller == p.operator && p.operator != address(0));
        if (ok && !allowed) _breach(OUTSIDER, "deprecatePlan by someone not provider/operator");
        if (!ok && allowed) _breach(LIVENESS, "provider/operator could not deprecate");
    }

    // ------------------------------------------------------------------ subscribing

    function subscribe(uint256 who, uint256 planSeed, uint256 maxOverage) external {
        if (planIds.length == 0) return;
        address s = subscribers[who % 3];
        bytes32 planId = planIds[planSeed % planIds.length];
        bytes32 id = subs.subscriptionIdFor(planId, s, subs.nonces(s));
        callNote = "subscribe";
        (bool ok,) =
            _exec(Op.Subscribe, s, id, true, abi.encodeCall(Subscriptions.subscribe, (planId, _overage(maxOverage))));
        if (ok) subIds.push(id);
    }

    struct SubscribeArgs {
        address s;
        bytes32 planId;
        uint256 nonce;
        uint256 maxOverage;
        uint256 deadline;
        uint256 key;
        uint256 permitValue;
        bool forged;
    }

    /// @dev signerSeed % 4 == 0: signed by the attacker (a forgery); otherwise by the subscriber.
    function subscribeWithSig(
        uint256 who,
        uint256 planSeed,
        uint256 maxOverage,
        uint256 signerSeed,
        uint256 permitValue,
        uint256 deadlineDelta,
        bool withPermit
    ) external {
        if (planIds.length == 0) return;
        SubscribeArgs memory a;
        a.s = subscribers[who % 3];
        a.planId = planIds[planSeed % planIds.length];
        a.nonce = subs.nonces(a.s);
        a.maxOverage = _overage(maxOverage);
        a.deadline = deadlineDelta % 7 == 0 ? block.timestamp - 1 : block.timestamp + _bound(deadlineDelta, 0, 2 days);
        a.forged = signerSeed % 4 == 0;
        a.key = a.forged ? attackerKey : subscriberKeys[who % 3];
        a.permitValue = _bound(permitValue, 0, 1e10);
        bytes32 id = subs.subscriptionIdFor(a.planId, a.s, a.nonce);
        bytes memory data = _subscribeWithSigCall(a, withPermit);
        callNote = a.forged ? "subscribeWithSig (forged)" : "subscribeWithSig";
        (bool ok,) = _exec(Op.Subscribe, a.forged ? attacker : relayer, id, !a.forged, data);
        if (ok) {
            subIds.push(id);
            if (a.forged) _breach(ONLY_SUBSCRIBER, "subscribeWithSig accepted the attacker's signature");
        }
    }

    function _subscribeWithSigCall(SubscribeArgs memory a, bool withPermit) internal view returns (bytes memory) {
        bytes memory sig = _sig(
            a.key,
            _digest(
                subs.DOMAIN_SEPARATOR(),
                keccak256(abi.encode(subs.SUBSCRIBE_TYPEHASH(), a.planId, a.s, a.maxOverage, a.nonce, a.deadline))
            )
        );
        bytes memory permitSig;
        if (withPermit) {
            bytes32 permitHash = keccak256(
                abi.encode(
                    keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)"),
                    a.s,
                    address(subs),
                    a.permitValue,
                    token.nonces(a.s),
                    a.deadline
                )
            );
            permitSig = _sig(a.key, _digest(token.DOMAIN_SEPARATOR(), permitHash));
        }
        return abi.encodeCall(
            Subscriptions.subscribeWithSig,
            (a.planId, a.s, a.maxOverage, a.deadline, sig, a.permitValue, a.deadline, permitSig)
        );
    }

    // ------------------------------------------------------------------ billing

    function collect(uint256 subSeed, uint256 callerSeed, uint256 cycleOffset) external {
        if (subIds.length == 0) return;
        bytes32 id = subIds[subSeed % subIds.length];
        Snap memory s0 = _snap(id);
        PlanView memory p = _plan(_planOf(id));
        address sub = _subscriber(id);
        uint32 cycle = uint32(s0.cycle + 1);
        if (cycleOffset % 5 == 0) cycle = uint32(s0.cycle + (cycleOffset % 3)); // wrong cycles too
        address caller = [relayer, attacker, p.provider, sub][callerSeed % 4];
        bool due = block.timestamp >= s0.paidThrough;
        bool canPull = token.balanceOf(sub) >= p.amount && token.allowance(sub, address(subs)) >= p.amount;
        // Sometimes a keeper gives collect too little gas: it may revert, never pause a payer who can pay.
        bool starved = callerSeed % 8 == 7;
        if (starved) gasCap = _bound(cycleOffset >> 8, 20_000, 150_000);
        callNote = starved ? "collect (gas-starved)" : "collect";
        (bool ok, bytes memory ret) =
            _exec(Op.Collect, caller, id, false, abi.encodeCall(Subscriptions.collect, (id, cycle)));
        if (s0.state == ACTIVE && due && cycle == s0.cycle + 1) {
            if (!ok && !starved) _breach(LIVENESS, "collect of a due, active subscription reverted");
            else if (ok && abi.decode(ret, (bool)) != canPull) {
                _breach(LIVENESS, "collect's result is not whether it could pull");
            }
        } else if (ok) {
            _breach(ONCE_PER_CYCLE, "collect went through for a wrong cycle, a not-due or inactive subscription");
        }
    }

    function chargeOverage(uint256 subSeed, uint256 callerSeed, uint256 amount, uint256 cycleOffset, uint256 refSeed)
        external
    {
        if (subIds.length == 0) return;
        bytes32 id = subIds[subSeed % subIds.length];
        address caller = _pick(callerSeed, _plan(_planOf(id)), _subscriber(id));
        bytes memory data = _chargeCall(id, amount, cycleOffset, refSeed);
        callNote = "chargeOverage";
        _exec(Op.Charge, caller, id, false, data);
    }

    function _chargeCall(bytes32 id, uint256 amount, uint256 cycleOffset, uint256 refSeed)
        internal
        view
        returns (bytes memory)
    {
        Snap memory s0 = _snap(id);
        uint32 cycle = cycleOffset % 6 == 0 ? uint32(s0.cycle + 1) : s0.cycle;
        uint256 remaining = s0.overageUsed > s0.maxOverage ? 0 : s0.maxOverage - s0.overageUsed;
        uint256 amt = _plan(_planOf(id)).amount;
        uint256 mode = amount % 8;
        if (remaining >= type(uint128).max) mode = mode % 2 == 0 ? 0 : 7; // no sums near 2^256
        if (mode == 1) amount = remaining;
        else if (mode == 2) amount = remaining + 1;
        else if (mode == 3) amount = remaining + amt;
        else if (mode == 4) amount = 1;
        else if (mode == 5) amount = 0;
        else if (mode == 6) amount = _bound(amount >> 3, 1, remaining + 2 * amt);
        else if (mode == 7) amount = _bound(amount >> 3, 1, 100e6);
        return abi.encodeCall(Subscriptions.chargeOverage, (id, cycle, amount, bytes32(refSeed % 8)));
    }

    // ------------------------------------------------------------------ subscriber actions

    /// @dev action 1 pause, 2 resume, 3 cancel, 4 raiseAllowance; callerSeed % 4 == 0: the
    ///      subscriber, otherwise someone else (the attacker, a provider, another subscriber).
    function act(uint256 subSeed, uint8 action, uint256 callerSeed, uint256 value) external {
        if (subIds.length == 0) return;
        bytes32 id = subIds[subSeed % subIds.length];
        address sub = _subscriber(id);
        action = uint8(1 + (action % 4));
        address caller = callerSeed % 2 == 0 ? sub : [attacker, providers[0], subscribers[callerSeed % 3]][callerSeed % 3];
        bool bySubscriber = caller == sub;
        bytes memory data;
        if (action == 1) data = abi.encodeCall(Subscriptions.pause, (id));
        else if (action == 2) data = abi.encodeCall(Subscriptions.resume, (id));
        else if (action == 3) data = abi.encodeCall(Subscriptions.cancel, (id));
        else data = abi.encodeCall(Subscriptions.raiseAllowance, (id, _raise(id, value)));
        callNote = string.concat("action ", vm.toString(uint256(action)), bySubscriber ? " by subscriber" : " by other");
        Snap memory s0 = _snap(id);
        (bool ok,) = _exec(Op.Action, caller, id, bySubscriber, data);
        if (ok && !bySubscriber) _breach(ONLY_SUBSCRIBER, "an action by someone not the subscriber went through");
        if (bySubscriber && !ok && action == 1 && s0.state == ACTIVE) _breach(LIVENESS, "subscriber could not pause");
        if (bySubscriber && !ok && action == 3 && (s0.state == ACTIVE || s0.state == PAUSED)) {
            _breach(LIVENESS, "subscriber could not cancel");
        }
    }

    /// @dev The *WithSig actions, submitted by the relayer (or the attacker). signerSeed % 4:
    ///      0 the attacker signs, 1 the subscriber's previous signature is replayed, else the
    ///      subscriber signs.
    function actWithSig(uint256 subSeed, uint8 action, uint256 signerSeed, uint256 value, uint256 deadlineDelta)
        external
    {
        if (subIds.length == 0) return;
        bytes32 id = subIds[subSeed % subIds.length];
        address sub = _subscriber(id);
        uint256 mode = signerSeed % 4;
        action = uint8(1 + (action % 4));
        uint256 deadline = block.timestamp + _bound(deadlineDelta, 0, 2 days);
        if (deadlineDelta % 9 == 0) deadline = block.timestamp - 1;
        bytes memory sig;
        if (mode == 1) {
            if (lastSig[id].length == 0) return;
            sig = lastSig[id];
            action = lastAction[id];
            value = lastValue[id];
            deadline = lastDeadline[id];
        } else {
            value = action == 4 ? _raise(id, value) : 0;
            bytes32 structHash =
                keccak256(abi.encode(subs.ACTION_TYPEHASH(), id, action, value, subs.nonces(sub), deadline));
            sig = _sig(mode == 0 ? attackerKey : _keyOf(sub), _digest(subs.DOMAIN_SEPARATOR(), structHash));
        }
        bytes memory data;
        if (action == 1) data = abi.encodeCall(Subscriptions.pauseWithSig, (id, deadline, sig));
        else if (action == 2) data = abi.encodeCall(Subscriptions.resumeWithSig, (id, deadline, sig));
        else if (action == 3) data = abi.encodeCall(Subscriptions.cancelWithSig, (id, deadline, sig));
        else data = abi.encodeCall(Subscriptions.raiseAllowanceWithSig, (id, value, deadline, sig));
        bool bySubscriber = mode >= 2;
        callNote = string.concat(
            "actionWithSig ", vm.toString(uint256(action)), mode == 0 ? " forged" : mode == 1 ? " replayed" : ""
        );
        (bool ok,) = _exec(Op.Action, mode == 0 ? attacker : relayer, id, bySubscriber, data);
        if (ok && !bySubscriber) _breach(ONLY_SUBSCRIBER, "a forged or replayed signature was accepted");
        if (ok && bySubscriber) {
            lastSig[id] = sig;
            lastAction[id] = action;
            lastValue[id] = value;
            lastDeadline[id] = deadline;
        }
    }

    /// @dev Every view; none may panic (remainingAllowance's subtraction included).
    function views(uint256 subSeed, address anyone, bytes32 anything) external {
        callNote = "views";
        bytes32 id = subIds.length == 0 ? anything : subIds[subSeed % subIds.length];
        bytes[8] memory data = [
            abi.encodeCall(Subscriptions.status, (id)),
            abi.encodeCall(Subscriptions.remainingAllowance, (id)),
            abi.encodeWithSignature("subscriptions(bytes32)", id),
            abi.encodeWithSignature("plans(bytes32)", _planOf(id)),
            abi.encodeWithSignature("nonces(address)", anyone),
            abi.encodeWithSignature("chargeApplied(bytes32)", anything),
            abi.encodeCall(Subscriptions.planIdFor, (anyone, anything)),
            abi.encodeCall(Subscriptions.subscriptionIdFor, (id, anyone, uint256(anything)))
        ];
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory ret) = address(subs).staticcall(data[i]);
            _noPanic(NO_PANIC, ok, ret);
            if (!ok) _breach(NO_PANIC, "a view reverted");
        }
        (bool ok2, bytes memory ret2) = address(subs).staticcall(abi.encodeCall(Subscriptions.DOMAIN_SEPARATOR, ()));
        if (!ok2) _noPanic(NO_PANIC, ok2, ret2);
    }

    // ------------------------------------------------------------------ the checks

    /// @dev Makes one call as `caller` and checks every subscription and balance against it.
    ///      `id` is the subscription the call is about (zero for plan calls); `bySubscriber`: the
    ///      call carries the subscriber's own transaction or fresh signature.
    function _exec(Op op, address caller, bytes32 id, bool bySubscriber, bytes memory data)
        internal
        returns (bool ok, bytes memory ret)
    {
        calls++;
        uint256[] memory b0 = _balances();
        Snap[] memory all0 = _snaps();
        Snap memory s0 = _snap(id);
        bool deprecated0 = id == bytes32(0) ? false : _plan(_planOf(id)).deprecated;
        if (op == Op.Subscribe) deprecated0 = _plan(_planFromCall(data)).deprecated;
        vm.recordLogs();
        uint256 g = gasCap == 0 ? gasleft() : gasCap;
        gasCap = 0;
        vm.prank(caller);
        (ok, ret) = address(subs).call{gas: g}(data);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        _noPanic(NO_PANIC, ok, ret);
        if (ok) succeeded[_selector(data)]++;
        uint256[] memory b1 = _balances();

        if (token.balanceOf(address(subs)) != 0) _breach(HOLDS_NOTHING, "Subscriptions holds tokens");
        // Every other subscription is untouched.
        for (uint256 i = 0; i < all0.length; i++) {
            if (subIds[i] != id && !_same(all0[i], _snap(subIds[i]))) {
                _breach(caller == attacker ? OUTSIDER : ONLY_SUBSCRIBER, "a call changed another subscription");
            }
        }
        if (!ok) return (ok, ret);
        if (id == bytes32(0)) {
            for (uint256 i = 0; i < b0.length; i++) {
                if (b0[i] != b1[i]) _breach(OUTSIDER, "a plan call moved funds");
            }
            return (ok, ret);
        }
        Ctx memory c;
        c.op = op;
        c.caller = caller;
        c.id = id;
        c.bySubscriber = bySubscriber;
        c.s0 = s0;
        c.deprecated0 = deprecated0;
        _checkFunds(c, b0, b1, logs);
        _checkSubscription(c);
    }

    struct Ctx {
        Op op;
        address caller;
        bytes32 id;
        bool bySubscriber;
        bool deprecated0;
        Snap s0;
        PlanView p;
        address sub;
        uint256 pulled;
    }

    function _checkFunds(Ctx memory c, uint256[] memory b0, uint256[] memory b1, Vm.Log[] memory logs) internal {
        c.p = _plan(_planOf(c.id));
        c.sub = _subscriber(c.id);
        for (uint256 i = 0; i < parties.length; i++) {
            address a = parties[i];
            if (a == c.sub) {
                if (b1[i] > b0[i]) _breach(ONLY_PAYTO, "the subscriber was paid");
                else c.pulled = b0[i] - b1[i];
            } else if (a != c.p.payTo && b0[i] != b1[i]) {
                _breach(b1[i] > b0[i] ? ONLY_PAYTO : OUTSIDER, "a party other than subscriber and payTo moved");
            }
        }
        uint256 k = _indexOf(c.p.payTo);
        if (b1[k] - b0[k] != c.pulled) _breach(ONLY_PAYTO, "payTo did not get exactly what was pulled");
        ghostPulled += c.pulled;
        uint256 reported = _reported(c.id, logs);
        ghostReported += reported;
        if (reported != c.pulled) _breach(EVENTS, "events do not report what was pulled");
        if (c.caller == attacker && c.op != Op.Collect && c.pulled != 0) _breach(OUTSIDER, "the attacker moved funds");
    }

    function _checkSubscription(Ctx memory c) internal {
        Snap memory s0 = c.s0;
        Snap memory s1 = _snap(c.id);
        bytes32 id = c.id;
        Op op = c.op;
        uint256 pulled = c.pulled;
        if (s0.state == NONE) {
            if (op != Op.Subscribe || !c.bySubscriber) _breach(ONLY_SUBSCRIBER, "a subscription was created unsigned");
            if (c.deprecated0) _breach(DEPRECATED, "a deprecated plan took a new subscriber");
            if (s1.state != ACTIVE || s1.cycle != 1) _breach(ONCE_PER_CYCLE, "a new subscription is not ACTIVE at cycle 1");
        }
        if (s0.state == CANCELLED) {
            if (s1.state != CANCELLED || s1.cycle != s0.cycle || s1.paidThrough != s0.paidThrough || s1.maxOverage != s0.maxOverage) {
                _breach(AFTER_CANCEL, "a cancelled subscription changed");
            }
            if (op != Op.Charge && pulled != 0) _breach(AFTER_CANCEL, "a cancelled subscription was billed");
        }
        if (s1.cycle != s0.cycle) {
            if (s1.cycle != s0.cycle + 1) _breach(ONCE_PER_CYCLE, "the cycle moved by more than one");
            if (billed[id][s1.cycle]) _breach(ONCE_PER_CYCLE, "a cycle was billed twice");
            billed[id][s1.cycle] = true;
            bills[id]++;
            if (s0.state != NONE && block.timestamp < s0.paidThrough) _breach(NOT_BEFORE_DUE, "billed before due");
            if (s0.state == PAUSED && op != Op.Action) _breach(PAUSE_RESUME, "a paused subscription was billed");
            if (pulled != c.p.amount) _breach(ONCE_PER_CYCLE, "a billing did not pull exactly the plan amount");
            if (s1.paidThrough != block.timestamp + c.p.interval) _breach(PAUSE_RESUME, "paidThrough is not now + interval");
            if (s1.overageUsed != 0) _breach(CAP, "the overage used was not reset by a billing");
            pulledInCycle[id][s1.cycle] = pulled;
        } else {
            if (op != Op.Charge && pulled != 0) _breach(ONCE_PER_CYCLE, "funds were pulled without a billing or charge");
            if (op == Op.Charge && pulled != s1.overageUsed - s0.overageUsed) {
                _breach(CAP, "overage pulled differs from overage recorded");
            }
            if (s1.paidThrough != s0.paidThrough) _breach(PAUSE_RESUME, "paidThrough moved without a billing");
            pulledInCycle[id][s1.cycle] += pulled;
        }
        if (bills[id] != s1.cycle) _breach(PAUSE_RESUME, "cycles billed differ from the cycle count");
        uint256 cap = c.p.amount + (s1.maxOverage > type(uint128).max ? type(uint128).max : s1.maxOverage);
        if (pulledInCycle[id][s1.cycle] > cap) _breach(CAP, "pulled more than amount + maxOverage in a cycle");
        if (op == Op.Charge) {
            bool allowed = c.caller == c.p.provider || (c.caller == c.p.operator && c.p.operator != address(0));
            if (!allowed) _breach(OUTSIDER, "overage charged by someone not provider/operator");
        }
        if (!c.bySubscriber) {
            if (s1.maxOverage != s0.maxOverage) _breach(ONLY_SUBSCRIBER, "maxOverage changed without the subscriber");
            bool pausedByFailedCollect =
                op == Op.Collect && s0.state == ACTIVE && s1.state == PAUSED && pulled == 0 && s1.cycle == s0.cycle;
            if (s1.state != s0.state && !pausedByFailedCollect) {
                _breach(ONLY_SUBSCRIBER, "the state changed without the subscriber");
            }
        }
        if (s1.maxOverage < s0.maxOverage) _breach(CAP, "maxOverage went down");
    }

    /// @dev The sum of SubscriptionRenewed and OverageCharged amounts for `id` in `logs`.
    function _reported(bytes32 id, Vm.Log[] memory logs) internal returns (uint256 sum) {
        bytes32 renewed = keccak256("SubscriptionRenewed(bytes32,uint32,uint256,uint64)");
        bytes32 charged = keccak256("OverageCharged(bytes32,uint32,uint256,uint256,bytes32)");
        for (uint256 i = 0; i < logs.length; i++) {
            Vm.Log memory l = logs[i];
            if (l.emitter != address(subs) || l.topics.length < 2) continue;
            if (l.topics[0] == renewed || l.topics[0] == charged) {
                if (l.topics[1] != id) _breach(EVENTS, "an event names another subscription");
                (, uint256 amount) = abi.decode(l.data, (uint32, uint256));
                sum += amount;
            }
        }
    }

    // ------------------------------------------------------------------ helpers

    function _overage(uint256 x) internal pure returns (uint256) {
        if (x % 10 == 0) return type(uint256).max;
        if (x % 10 == 1) return 0;
        return _bound(x, 0, 50e6);
    }

    function _raise(bytes32 id, uint256 value) internal view returns (uint256) {
        uint256 cur = _snap(id).maxOverage;
        if (value % 5 == 0) return _bound(value, 0, cur); // not a raise: refused
        if (cur == type(uint256).max) return cur;
        return cur + _bound(value, 1, 10e6 < type(uint256).max - cur ? 10e6 : type(uint256).max - cur);
    }

    function _pick(uint256 seed, PlanView memory p, address sub) internal view returns (address) {
        uint256 i = seed % 6;
        if (i == 0 || i == 1) return p.provider;
        if (i == 2) return p.operator == address(0) ? p.provider : p.operator;
        if (i == 3) return attacker;
        if (i == 4) return sub == address(0) ? relayer : sub;
        return p.provider == providers[0] ? providers[1] : providers[0]; // another plan's provider
    }

    function _keyOf(address sub) internal view returns (uint256) {
        for (uint256 i = 0; i < 3; i++) {
            if (subscribers[i] == sub) return subscriberKeys[i];
        }
        return 0;
    }

    function _indexOf(address a) internal view returns (uint256) {
        for (uint256 i = 0; i < parties.length; i++) {
            if (parties[i] == a) return i;
        }
        revert("not a party");
    }

    function _balances() internal view returns (uint256[] memory b) {
        b = new uint256[](parties.length);
        for (uint256 i = 0; i < parties.length; i++) {
            b[i] = token.balanceOf(parties[i]);
        }
    }

    function _snap(bytes32 id) internal view returns (Snap memory s) {
        (,, s.state, s.cycle, s.paidThrough, s.maxOverage, s.overageUsed) = subs.subscriptions(id);
    }

    function _snaps() internal view returns (Snap[] memory all) {
        all = new Snap[](subIds.length);
        for (uint256 i = 0; i < subIds.length; i++) {
            all[i] = _snap(subIds[i]);
        }
    }

    function _same(Snap memory a, Snap memory b) internal pure returns (bool) {
        return a.state == b.state && a.cycle == b.cycle && a.paidThrough == b.paidThrough
            && a.maxOverage == b.maxOverage && a.overageUsed == b.overageUsed;
    }

    function _planOf(bytes32 id) internal view returns (bytes32 planId) {
        (planId,,,,,,) = subs.subscriptions(id);
    }

    function _subscriber(bytes32 id) internal view returns (address s) {
        (, s,,,,,) = subs.subscriptions(id);
    }

    function _plan(bytes32 planId) internal view returns (PlanView memory p) {
        (p.provider, p.operator,, p.payTo, p.amount, p.interval, p.deprecated) = subs.plans(planId);
    }

    /// @dev The planId argument (the first) of a subscribe/subscribeWithSig call.
    function _planFromCall(bytes memory data) internal pure returns (bytes32 planId) {
        assembly ("memory-safe") {
            planId := mload(add(data, 0x24))
        }
    }

    function subIdCount() external view returns (uint256) {
        return subIds.length;
    }
}
