// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {HalmosBase} from "./HalmosBase.sol";
import {Token} from "src/Token.sol";
import {Subscriptions} from "src/Subscriptions.sol";

/// @notice Subscriptions' per-cycle cap, for all plan amounts, intervals, caps, balances, charge
///         amounts, references, cycles and times: within one billing cycle of a subscription, the
///         first billing or renewal (subscribe, collect, resume) and every chargeOverage together
///         move at most `plan.amount + maxOverage` from the subscriber, all of it to the plan's payTo.
/// @dev Each step of a proof is taken or skipped (a symbolic choice), and a path on which a call
///      reverts ends there (a reverted call moves nothing, so that path is the same as the one
///      that skips the call): every subsequence of the steps whose calls succeed is covered. The cycle is the contract's `cycle` field, and
///      the checks also prove that it only advances by one, only when the cycle was due
///      (`block.timestamp >= paidThrough`), and only by a renewal that pulled the plan amount.
contract SubscriptionsCycleCapTest is HalmosBase {
    Token internal token;
    Subscriptions internal subs;

    address internal constant PROVIDER = address(0x9A0);
    address internal constant OPERATOR = address(0x09E);
    address internal constant PAY_TO = address(0x9A1);
    address internal constant SUB = address(0x5B5);
    address internal constant KEEPER = address(0xCEE);

    bytes32 internal id;
    uint256 internal planAmount;

    // What the test tracks of the current cycle.
    uint32 internal trackedCycle;
    uint64 internal trackedPaidThrough;
    uint256 internal spentInCycle;

    function setUp() public {
        token = new Token("USD Coin", "USDC", "2", address(this));
        subs = new Subscriptions();
    }

    /// @dev A plan with symbolic amount and interval, and SUB subscribed to it with a symbolic cap.
    function open() internal {
        planAmount = svm.createUint256("planAmount");
        uint64 interval = uint64(svm.createUint(64, "interval"));
        uint256 maxOverage = svm.createUint256("maxOverage");
        uint256 balance = svm.createUint256("balance");
        vm.assume(balance < 2 ** 128);
        vm.warp(svm.createUint(40, "t0"));

        vm.prank(PROVIDER);
        bytes32 planId = subs.createPlan(address(token), PAY_TO, planAmount, interval, OPERATOR, bytes32(0));
        token.mint(SUB, balance);
        vm.prank(SUB);
        token.approve(address(subs), type(uint256).max);

        uint256 before = token.balanceOf(SUB);
        vm.prank(SUB);
        id = subs.subscribe(planId, maxOverage);
        (,,, uint32 cycle, uint64 paidThrough,,) = subs.subscriptions(id);
        assert(cycle == 1);
        trackedCycle = 1;
        trackedPaidThrough = paidThrough;
        spentInCycle = before - token.balanceOf(SUB);
        assert(spentInCycle == planAmount);
        checkCap();
    }

    /// @dev After each call: account what moved to the current cycle and check the cap.
    function account(uint256 subBefore, uint256 payToBefore) internal {
        uint256 moved = subBefore - token.balanceOf(SUB);
        assert(token.balanceOf(PAY_TO) - payToBefore == moved); // all of it to payTo
        (,,, uint32 cycle, uint64 paidThrough,,) = subs.subscriptions(id);
        if (cycle != trackedCycle) {
            assert(cycle == trackedCycle + 1);
            assert(block.timestamp >= trackedPaidThrough); // never before the cycle is due
            assert(moved >= planAmount); // a new cycle is always paid
            trackedCycle = cycle;
            spentInCycle = moved;
        } else {
            spentInCycle += moved;
        }
        trackedPaidThrough = paidThrough;
        checkCap();
    }

    function checkCap() internal view {
        (,,,,, uint256 maxOverage,) = subs.subscriptions(id);
        assert(spentInCycle <= planAmount || spentInCycle - planAmount <= maxOverage);
    }

    // ------------------------------------------------------------ steps (each may revert)

    function charge(address caller) internal {
        if (svm.createBool("skipCharge")) return;
        uint32 cycle = uint32(svm.createUint(32, "chargeCycle"));
        uint256 amount = svm.createUint256("chargeAmount");
        bytes32 ref = svm.createBytes32("chargeRef");
        (uint256 s, uint256 p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(caller);
        subs.chargeOverage(id, cycle, amount, ref);
        account(s, p);
    }

    function collect() internal {
        if (svm.createBool("skipCollect")) return;
        vm.warp(block.timestamp + svm.createUint(40, "collectAfter"));
        uint32 cycle = uint32(svm.createUint(32, "collectCycle"));
        (uint256 s, uint256 p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(KEEPER);
        subs.collect(id, cycle);
        account(s, p);
    }

    function pauseThenResume() internal {
        if (svm.createBool("skipPauseResume")) return;
        (uint256 s, uint256 p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(SUB);
        subs.pause(id);
        account(s, p);
        vm.warp(block.timestamp + svm.createUint(40, "resumeAfter"));
        (s, p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(SUB);
        subs.resume(id);
        account(s, p);
    }

    function raise() internal {
        if (svm.createBool("skipRaise")) return;
        uint256 newMax = svm.createUint256("newMaxOverage");
        (uint256 s, uint256 p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(SUB);
        subs.raiseAllowance(id, newMax);
        account(s, p);
    }

    function cancel() internal {
        if (svm.createBool("skipCancel")) return;
        (uint256 s, uint256 p) = (token.balanceOf(SUB), token.balanceOf(PAY_TO));
        vm.prank(SUB);
        subs.cancel(id);
        account(s, p);
    }

    // ------------------------------------------------------------ the proofs

    /// @dev subscribe, then three overage charges (provider, operator, provider) in cycle 1.
    function check_capSubscribeThenCharges() public {
        open();
        charge(PROVIDER);
        charge(OPERATOR);
        charge(PROVIDER);
    }

    /// @dev A charge in cycle 1, a keeper's collect after any time, then three charges (of any
    ///      cycle number: a late batch for cycle 1 included).
    function check_capCollectThenCharges() public {
        open();
        charge(PROVIDER);
        collect();
        charge(PROVIDER);
        charge(OPERATOR);
        charge(PROVIDER);
    }

    /// @dev A charge, pause, resume after any time (which bills a new cycle when due), two charges.
    function check_capResumeThenCharges() public {
        open();
        charge(PROVIDER);
        pauseThenResume();
        charge(PROVIDER);
        charge(OPERATOR);
    }

    /// @dev Charges around a raise of the cap and a cancel (charges after cancel stay in the cap).
    function check_capRaiseCancelCharges() public {
        open();
        charge(PROVIDER);
        raise();
        charge(OPERATOR);
        cancel();
        charge(PROVIDER);
    }

    /// @dev Any sequence of four steps out of charge (provider or operator), collect, pause+resume,
    ///      raise and cancel, each with symbolic arguments and time jumps.
    function check_capAnySequence() public {
        open();
        step(uint8(svm.createUint(8, "op1")));
        step(uint8(svm.createUint(8, "op2")));
        step(uint8(svm.createUint(8, "op3")));
        step(uint8(svm.createUint(8, "op4")));
    }

    function step(uint8 op) internal {
        if (op == 0) charge(PROVIDER);
        else if (op == 1) charge(OPERATOR);
        else if (op == 2) collect();
        else if (op == 3) pauseThenResume();
        else if (op == 4) raise();
        else if (op == 5) cancel();
    }
}
