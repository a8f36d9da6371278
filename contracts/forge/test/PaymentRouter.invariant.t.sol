// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {FiatTokenDeployer} from "./FiatToken.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";
import {Token} from "src/Token.sol";
import {PaymentRouterHandler} from "./PaymentRouterHandler.sol";
import {IToken} from "./SubscriptionsHandler.sol";

/// @dev Invariants of PaymentRouter over random sequences of PaymentRouterHandler's calls, with the
///      project's Token.
contract PaymentRouterInvariants is FiatTokenDeployer {
    PaymentRouterHandler internal handler;
    PaymentRouter internal router;
    IToken internal token;
    address internal constant FEE_RECIPIENT = address(0xFEE);

    function setUp() public {
        vm.warp(1_750_000_000);
        token = IToken(_token());
        router = new PaymentRouter(address(token), FEE_RECIPIENT);
        handler = new PaymentRouterHandler(router, token, FEE_RECIPIENT);
        _allowMinting(address(token), address(handler));
    }

    /// @dev The project's Token, minted by its owner: the handler, created after it and the router.
    function _token() internal virtual returns (address) {
        return address(new Token("USD Coin", "USDC", "2", _create(vmf.getNonce(address(this)) + 2)));
    }

    function _allowMinting(address, address) internal virtual override {}

    function targetContracts() public view returns (address[] memory t) {
        t = new address[](1);
        t[0] = address(handler);
    }

    /// @dev One campaign checks every invariant after every call; a failure names the invariant and
    ///      the first breach.
    function invariant_paymentRouter() public view {
        handler.check(0, "the router holds no token after any call");
        handler.check(1, "settle pays exactly amount - fee to payTo and fee to the fee recipient");
        handler.check(2, "only transfers their payers signed are carried out, each once");
        handler.check(3, "in settleTransfers no member makes another fail, pay twice or pay someone else");
        handler.check(4, "nothing ends in a panic code");
        handler.check(5, "no outsider call moves a third party's funds");
        handler.check(6, "simulateTransfers changes nothing and answers what settleTransfers would do");
        handler.check(7, "a valid, funded, fresh payment goes through");
        _assertEq(token.balanceOf(address(router)), 0, "the router's balance");
    }
}

/// @dev The same invariants with Circle's FiatToken v2.2 (proxy, linked SignatureChecker) as the token.
contract PaymentRouterFiatTokenInvariants is PaymentRouterInvariants {
    function _token() internal override returns (address) {
        return _deployFiatToken();
    }

    function _allowMinting(address usdc, address minter) internal override {
        FiatTokenDeployer._allowMinting(usdc, minter);
    }
}
