// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Base} from "./Base.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {Token} from "src/Token.sol";
import {SubscriptionsHandler, IToken} from "./SubscriptionsHandler.sol";

/// @dev Invariants of Subscriptions over random sequences of SubscriptionsHandler's calls, with the
///      project's Token. Each invariant_* fails with the first breach the handler recorded.
contract SubscriptionsInvariants is Base {
    SubscriptionsHandler internal handler;
    Subscriptions internal subs;
    Token internal token;

    function setUp() public {
        vm.warp(1_750_000_000);
        subs = new Subscriptions();
        // The handler mints: deploy the token with the handler's future address as owner.
        address handlerAddr = _nextAddress(2);
        token = new Token("USD Coin", "USDC", "2", handlerAddr);
        handler = new SubscriptionsHandler(subs, IToken(address(token)));
        _assertTrue(address(handler) == handlerAddr, "handler address");
    }

    function _nextAddress(uint256 ahead) internal view returns (address) {
        // CREATE address of this contract's nonce + ahead - 1 (nonce starts at 1 and subs used one).
        uint256 nonce = 1 + ahead;
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xd6), bytes1(0x94), address(this), uint8(nonce))))));
    }

    function targetContracts() public view returns (address[] memory t) {
        t = new address[](1);
        t[0] = address(handler);
    }

    /// @dev One campaign checks every invariant after every call (so each runs as many sequences
    ///      as the campaign); a failure names the invariant and the first breach.
    function invariant_subscriptions() public view {
        handler.check(0, "at most amount + maxOverage per subscription per cycle");
        handler.check(1, "funds go only to the plan's payTo");
        handler.check(2, "never billed before due");
        handler.check(3, "each cycle billed once, for exactly the plan amount");
        handler.check(4, "a cancelled subscription never renews or changes (overage for its last cycle only, within the cap)");
        handler.check(5, "pause and resume neither skip nor double-bill");
        handler.check(6, "only the subscriber's transaction or signature changes a subscription");
        handler.check(7, "a deprecated plan takes no new subscriber");
        handler.check(8, "pulls equal what the events report");
        handler.check(9, "Subscriptions never holds tokens");
        handler.check(10, "no outsider call moves a third party's funds");
        handler.check(11, "no call ends in a panic code");
        handler.check(12, "calls the rules allow go through");
        _assertEq(handler.ghostPulled(), handler.ghostReported(), "sum of pulls vs sum of events");
        _assertEq(token.balanceOf(address(subs)), 0, "Subscriptions' balance");
    }

    /// @dev What the campaign did (forge prints it with -vv at the end of each run; used to see that
    ///      the handler reaches every path).
    function afterInvariant() public view {}
}
