// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Base, VmFiles} from "./Base.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";
import {Token} from "src/Token.sol";

/// @dev A plan token under the provider's control: its transferFrom moves balances like an ERC-20,
///      but when armed it first re-enters Subscriptions with the call it was given (it is the
///      plan's operator, or holds a signature someone gave it) and then answers `false`, so the
///      renewal it is called from fails and undoes its own effects.
contract HostileToken {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    Subscriptions internal immutable subs;
    bytes internal reentry;
    bool internal armed;
    /// @dev What the re-entrant call returned (its revert data when it failed).
    bool public reentered;
    bytes public reentryResult;

    constructor(Subscriptions subs_) {
        subs = subs_;
    }

    function mint(address to, uint256 v) external {
        balanceOf[to] += v;
    }

    function approve(address s, uint256 v) external returns (bool) {
        allowance[msg.sender][s] = v;
        return true;
    }

    function arm(bytes calldata call) external {
        (reentry, armed) = (call, true);
    }

    function transferFrom(address from, address to, uint256 v) external returns (bool) {
        if (armed) {
            armed = false;
            (reentered, reentryResult) = address(subs).call(reentry);
            return false; // the renewal "fails": collect undoes its effects and pauses
        }
        allowance[from][msg.sender] -= v;
        balanceOf[from] -= v;
        balanceOf[to] += v;
        return true;
    }
}

/// @dev The bugs the suites and proofs of issue 35 found, each a failing test before its fix:
///      a hostile plan token re-entering Subscriptions from a renewal's token call, and payments
///      to the router itself (which would keep them for good: nothing can take tokens out of it).
contract FindingsTest is Base {
    bytes32 internal constant TRANSFER_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 internal constant RECEIVE_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    uint256 internal constant KEY = 0xA11CE;
    address internal constant PAY_TO = address(0xFA70);
    address internal constant FEE = address(0xFEE);
    uint256 internal constant DEADLINE = 2_000_000_000;

    Subscriptions internal subs;
    HostileToken internal hostile;
    address internal subscriber;
    bytes32 internal id;

    function setUp() public {
        vm.warp(1_750_000_000);
        subs = new Subscriptions();
        hostile = new HostileToken(subs);
        subscriber = vm.addr(KEY);
        hostile.mint(subscriber, 1_000e6);
        vm.prank(subscriber);
        hostile.approve(address(subs), type(uint256).max);
        // The token is the plan's operator: it may charge overage.
        bytes32 planId = subs.createPlan(address(hostile), PAY_TO, 10e6, 30 days, address(hostile), bytes32(0));
        vm.prank(subscriber);
        id = subs.subscribe(planId, 5e6); // cycle 1: 10e6, cap 10e6 + 5e6
    }

    /// @dev An overage charge made from inside collect's failing token call (the cycle already
    ///      advanced, overageUsed reset) survived collect's undo: the cycle's overage could be
    ///      charged twice, 20 units pulled in a cycle capped at 15.
    function test_hostileTokenReentrancyCannotExceedPerCycleCap() public {
        subs.chargeOverage(id, 1, 5e6, bytes32("a")); // cycle 1: the whole overage cap
        uint256 before = hostile.balanceOf(subscriber);
        vm.warp(block.timestamp + 30 days);
        hostile.arm(abi.encodeCall(Subscriptions.chargeOverage, (id, 2, 5e6, bytes32("reentered"))));
        _assertTrue(!subs.collect(id, 2), "collect reported failure (subscription paused)");
        _assertTrue(hostile.reentered() == false, "the re-entrant charge was refused");
        _assertTrue(
            _selector(hostile.reentryResult()) == Subscriptions.ReentrantCall.selector, "refused as ReentrantCall"
        );
        uint256 pulledInCycle1 = 10e6 + 5e6 + (before - hostile.balanceOf(subscriber));
        _assertEq(pulledInCycle1, 15e6, "pulled in cycle 1");
        (,,, uint32 cycle,,, uint256 overageUsed) = subs.subscriptions(id);
        _assertEq(cycle, 1, "cycle");
        _assertEq(overageUsed, 5e6, "overage used");
    }

    /// @dev A cancel made (with the subscriber's own signature) from inside collect's failing token
    ///      call was overwritten by collect's pause: a cancelled subscription came back PAUSED, and
    ///      could be resumed and billed again.
    function test_cancelledInsideAFailedRenewalStaysCancelled() public {
        vm.warp(block.timestamp + 30 days);
        uint256 nonce = subs.nonces(subscriber);
        bytes32 structHash = keccak256(abi.encode(subs.ACTION_TYPEHASH(), id, uint8(3), uint256(0), nonce, DEADLINE));
        bytes memory sig = _sig(KEY, _digest(subs.DOMAIN_SEPARATOR(), structHash));
        hostile.arm(abi.encodeCall(Subscriptions.cancelWithSig, (id, DEADLINE, sig)));
        _assertTrue(!subs.collect(id, 2), "collect reported failure");
        _assertTrue(
            _selector(hostile.reentryResult()) == Subscriptions.ReentrantCall.selector, "refused as ReentrantCall"
        );
        (uint8 state,) = subs.status(id);
        _assertEq(state, 2, "paused by the failed renewal");
        // The signature was not used: the subscriber cancels with it now, for good.
        subs.cancelWithSig(id, DEADLINE, sig);
        (state,) = subs.status(id);
        _assertEq(state, 3, "cancelled");
    }

    function test_aPlanPayingTheSubscriptionsContractIsRefused() public {
        vm.expectRevert(Subscriptions.InvalidPlan.selector);
        subs.createPlan(address(hostile), address(subs), 10e6, 30 days, address(0), bytes32("self"));
    }

    // ---------------------------------------------------------------- PaymentRouter

    function _router() internal returns (Token token, PaymentRouter router) {
        token = new Token("USD Coin", "USDC", "2", address(this));
        router = new PaymentRouter(address(token), FEE);
        token.mint(subscriber, 1_000e6);
    }

    function _transfer(Token token, address to, bytes32 nonce) internal view returns (PaymentRouter.Transfer memory t) {
        t = PaymentRouter.Transfer(subscriber, to, 10_000, 0, DEADLINE, nonce, "");
        bytes32 structHash = keccak256(abi.encode(TRANSFER_TYPEHASH, subscriber, to, t.value, 0, DEADLINE, nonce));
        t.signature = _sig(KEY, _digest(token.DOMAIN_SEPARATOR(), structHash));
    }

    /// @dev Found by the halmos fee-split proof: settle paid `amount - fee` to the router itself,
    ///      which nothing can take out.
    function test_settleRefusesAPaymentToTheRouter() public {
        (Token token, PaymentRouter router) = _router();
        bytes32 nonce = router.paymentNonce(address(router), bytes32("memo"), 100);
        bytes32 structHash =
            keccak256(abi.encode(RECEIVE_TYPEHASH, subscriber, address(router), 10_000, 0, DEADLINE, nonce));
        bytes memory sig = _sig(KEY, _digest(token.DOMAIN_SEPARATOR(), structHash));
        vm.expectRevert(abi.encodeWithSelector(PaymentRouter.InvalidPayee.selector, address(router)));
        router.settle(subscriber, address(router), 10_000, 100, bytes32("memo"), 0, DEADLINE, sig);
        _assertEq(token.balanceOf(address(router)), 0, "the router holds nothing");
        _assertEq(token.balanceOf(subscriber), 1_000e6, "the payer keeps the payment");
    }

    /// @dev A batched transfer to the router itself is skipped unsent (its payer keeps the funds
    ///      and the authorization stays unused); the others go through; the simulation names it.
    function test_settleTransfersSkipsATransferToTheRouter() public {
        (Token token, PaymentRouter router) = _router();
        PaymentRouter.Transfer[] memory ts = new PaymentRouter.Transfer[](2);
        ts[0] = _transfer(token, address(router), bytes32(uint256(1)));
        ts[1] = _transfer(token, PAY_TO, bytes32(uint256(2)));
        bytes[] memory results = router.simulateTransfers(ts);
        _assertTrue(
            keccak256(results[0]) == keccak256(abi.encodeWithSelector(PaymentRouter.InvalidPayee.selector, address(router))),
            "simulated: InvalidPayee"
        );
        _assertTrue(_selector(results[1]) == PaymentRouter.Simulated.selector, "simulated: the other passes");
        _assertEq(router.settleTransfers(ts), 1, "settled");
        _assertEq(token.balanceOf(address(router)), 0, "the router holds nothing");
        _assertEq(token.balanceOf(PAY_TO), 10_000, "the other member paid");
        _assertTrue(!token.authorizationState(subscriber, bytes32(uint256(1))), "the skipped authorization is unused");
    }

    function test_aFeeRecipientThatIsTheRouterIsRefused() public {
        Token token = new Token("USD Coin", "USDC", "2", address(this));
        // The address the next CREATE of this contract makes (its nonce is below 128).
        uint64 nonce = VmFiles(address(vm)).getNonce(address(this));
        address next = address(uint160(uint256(keccak256(abi.encodePacked(bytes2(0xd694), address(this), uint8(nonce))))));
        vm.expectRevert(abi.encodeWithSelector(PaymentRouter.InvalidPayee.selector, next));
        new PaymentRouter(address(token), next);
    }
}
