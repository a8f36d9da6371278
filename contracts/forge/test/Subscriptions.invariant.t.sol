// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {FiatTokenDeployer} from "./FiatToken.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {Token} from "src/Token.sol";
import {SubscriptionsHandler, IToken} from "./SubscriptionsHandler.sol";

/// @dev Invariants of Subscriptions over random sequences of SubscriptionsHandler's calls, with the
///      project's Token. Each invariant_* fails with the first breach the handler recorded.
contract SubscriptionsInvariants is FiatTokenDeployer {
    SubscriptionsHandler internal handler;
    Subscriptions internal subs;
    IToken internal token;

    function setUp() public {
        vm.warp(1_750_000_000);
        subs = new Subscriptions();
        token = IToken(_token());
        handler = new SubscriptionsHandler(subs, token);
        _allowMinting(address(token), address(handler));
    }

    /// @dev The project's Token, minted by its owner: the handler, created right after it.
    function _token() internal virtual returns (address) {
        return address(new Token("USD Coin", "USDC", "2", _create(vmf.getNonce(address(this)) + 1)));
    }

    function _allowMinting(address, address) internal virtual override {}

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

/// @dev The same invariants with Circle's FiatToken v2.2 (proxy, linked SignatureChecker) as the token.
contract SubscriptionsFiatTokenInvariants is SubscriptionsInvariants {
    function _token() internal override returns (address) {
        return _deployFiatToken();
    }

    function _allowMinting(address usdc, address minter) internal override {
        FiatTokenDeployer._allowMinting(usdc, minter);
    }
}
