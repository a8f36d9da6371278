// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {HalmosBase} from "./HalmosBase.sol";
import {Token} from "src/Token.sol";
import {Subscriptions} from "src/Subscriptions.sol";

interface SVMCalldata {
    function createCalldata(string calldata contractName) external returns (bytes memory);
}

/// @notice Subscriptions' per-cycle cap for every sequence of calls of any length, by induction.
///         The invariant, per subscription: what was pulled from the subscriber in its current
///         cycle is exactly `plan.amount + overageUsed`, with `overageUsed <= maxOverage`.
///         - Base: `subscribe` pulls exactly `plan.amount`, in cycle 1, with `overageUsed = 0`
///           (check_capBase).
///         - Step: from ANY state of the subscription where `overageUsed <= maxOverage` (symbolic
///           state, cycle, paid-through time, overage used, balance, allowance and block time), ONE
///           call of ANY external function of Subscriptions, with any arguments from any caller,
///           either stays in the cycle and pulls exactly the growth of `overageUsed` (still within
///           `maxOverage`), or starts the next cycle (cycle + 1, only when due, ACTIVE) pulling
///           exactly `plan.amount` with `overageUsed = 0`; `maxOverage` never decreases, and all
///           that is pulled goes to the plan's payTo (check_capStepAnyCall; check_capStepCharge,
///           check_capStepCollect and check_capStepResume are the functions that pull, alone).
///         Hence no cycle ever moves more than `plan.amount + maxOverage`.
/// @dev Model: the project's Token; the plan from a real createPlan (symbolic amount, interval);
///      the subscriber an EOA holding this one subscription (a second one, opened in the step, is
///      proven to leave this one unchanged); "cycle" is the contract's `cycle` field, which the
///      step proves advances by one, only when due, and only by a renewal that pulls plan.amount.
contract SubscriptionsCapInductiveTest is HalmosBase {
    Token internal token;
    Subscriptions internal subs;

    address internal constant PROVIDER = address(0x9A0);
    address internal constant OPERATOR = address(0x09E);
    address internal constant PAY_TO = address(0x9A1);
    address internal constant SUB = address(0x5B5);

    bytes32 internal id;
    uint256 internal planAmount;

    function setUp() public {
        token = new Token("USD Coin", "USDC", "2", address(this));
        subs = new Subscriptions();
    }

    struct Sub {
        uint8 state;
        uint32 cycle;
        uint64 paidThrough;
        uint256 maxOverage;
        uint256 overageUsed;
    }

    function read() internal view returns (Sub memory s) {
        (,, s.state, s.cycle, s.paidThrough, s.maxOverage, s.overageUsed) = subs.subscriptions(id);
    }

    /// @dev A plan with symbolic amount and interval; SUB subscribes with a symbolic cap. Returns
    ///      what subscribe pulled.
    function open() internal returns (uint256 pulled) {
        planAmount = svm.createUint256("planAmount");
        uint64 interval = uint64(svm.createUint(64, "interval"));
        uint256 maxOverage = svm.createUint256("maxOverage");
        vm.warp(svm.createUint(64, "t0"));
        vm.prank(PROVIDER);
        bytes32 planId = subs.createPlan(address(token), PAY_TO, planAmount, interval, OPERATOR, bytes32(0));
        token.mint(SUB, planAmount);
        vm.prank(SUB);
        token.approve(address(subs), planAmount);
        vm.prank(SUB);
        id = subs.subscribe(planId, maxOverage);
        pulled = planAmount - token.balanceOf(SUB);
    }

    function check_capBase() public {
        uint256 pulled = open();
        Sub memory s = read();
        assert(pulled == planAmount);
        assert(token.balanceOf(PAY_TO) == planAmount);
        assert(s.cycle == 1 && s.overageUsed == 0 && s.state == 1);
    }

    // The state before the step, and the balances.
    Sub internal s0;
    uint256 internal subBefore;
    uint256 internal payToBefore;

    /// @dev Any state of the subscription that satisfies the invariant's hypothesis
    ///      (`overageUsed <= maxOverage`), any funds and allowance, any time.
    function arbitraryState() internal {
        open();
        bytes32 base = keccak256(abi.encode(id, uint256(1)));
        s0.state = uint8(svm.createUint(8, "state"));
        vm.assume(s0.state >= 1 && s0.state <= 3);
        s0.cycle = uint32(svm.createUint(32, "cycle"));
        vm.assume(s0.cycle >= 1);
        s0.paidThrough = uint64(svm.createUint(64, "paidThrough"));
        s0.maxOverage = read().maxOverage;
        s0.overageUsed = svm.createUint256("overageUsed");
        vm.assume(s0.overageUsed <= s0.maxOverage);
        vm.store(
            address(subs),
            bytes32(uint256(base) + 1),
            bytes32(uint256(uint160(SUB)) | (uint256(s0.state) << 160) | (uint256(s0.cycle) << 168))
        );
        vm.store(address(subs), bytes32(uint256(base) + 2), bytes32(uint256(s0.paidThrough)));
        vm.store(address(subs), bytes32(uint256(base) + 4), bytes32(s0.overageUsed));
        token.mint(SUB, svm.createUint(128, "balance"));
        vm.prank(SUB);
        token.approve(address(subs), svm.createUint256("allowance"));
        vm.warp(svm.createUint(64, "now"));
        subBefore = token.balanceOf(SUB);
        payToBefore = token.balanceOf(PAY_TO);
    }

    /// @dev The step lemma, after one successful call.
    function stepKeepsInvariant() internal view {
        Sub memory s1 = read();
        uint256 pulled = subBefore - token.balanceOf(SUB);
        assert(token.balanceOf(PAY_TO) - payToBefore == pulled);
        assert(s1.maxOverage >= s0.maxOverage);
        assert(s1.overageUsed <= s1.maxOverage);
        if (s1.cycle == s0.cycle) {
            assert(s1.overageUsed >= s0.overageUsed);
            assert(pulled == s1.overageUsed - s0.overageUsed);
        } else {
            assert(s1.cycle == s0.cycle + 1);
            assert(block.timestamp >= s0.paidThrough);
            assert(s1.state == 1);
            assert(s1.overageUsed == 0);
            assert(pulled == planAmount);
        }
    }

    /// @dev The step for chargeOverage (any cycle, amount, reference; the provider or operator).
    function check_capStepCharge(uint32 cycle, uint256 amount, bytes32 ref, bool byOperator) public {
        arbitraryState();
        vm.prank(byOperator ? OPERATOR : PROVIDER);
        subs.chargeOverage(id, cycle, amount, ref);
        stepKeepsInvariant();
    }

    /// @dev The step for collect (any cycle number, any caller).
    function check_capStepCollect(uint32 cycle, address keeper) public {
        arbitraryState();
        vm.prank(keeper);
        subs.collect(id, cycle);
        stepKeepsInvariant();
    }

    /// @dev The step for resume (resumeWithSig runs the same _resume after its signature check).
    function check_capStepResume() public {
        arbitraryState();
        vm.prank(SUB);
        subs.resume(id);
        stepKeepsInvariant();
    }

    /// @dev The step for every external function of Subscriptions at once (halmos' createCalldata:
    ///      each function, any arguments), from any caller.
    function check_capStepAnyCall() public {
        arbitraryState();
        bytes memory data = SVMCalldata(address(svm)).createCalldata("Subscriptions");
        vm.prank(svm.createAddress("caller"));
        (bool ok,) = address(subs).call(data);
        vm.assume(ok);
        bytes4 selector = bytes4(data);
        if (selector == Subscriptions.subscribe.selector || selector == Subscriptions.subscribeWithSig.selector) {
            // A new subscription (of SUB or anyone): it pulls its own first cycle (check_capBase)
            // and leaves this one as it was.
            Sub memory s1 = read();
            assert(s1.state == s0.state && s1.cycle == s0.cycle && s1.paidThrough == s0.paidThrough);
            assert(s1.maxOverage == s0.maxOverage && s1.overageUsed == s0.overageUsed);
            return;
        }
        stepKeepsInvariant();
    }
}
