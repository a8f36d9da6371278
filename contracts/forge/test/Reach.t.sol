// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {FiatTokenDeployer} from "./FiatToken.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";
import {Token} from "src/Token.sol";
import {SubscriptionsHandler, IToken} from "./SubscriptionsHandler.sol";
import {PaymentRouterHandler} from "./PaymentRouterHandler.sol";

/// @dev The handlers reach every state-changing function of both contracts: a fixed pseudo-random
///      sequence of handler calls makes each succeed at least once (so the invariant campaigns are
///      not vacuous), and breaks no invariant on the way.
contract ReachTest is FiatTokenDeployer {
    function test_subscriptionsHandlerReachesEveryFunction() public {
        vm.warp(1_750_000_000);
        Subscriptions subs = new Subscriptions();
        Token token = new Token("USD Coin", "USDC", "2", _create(3));
        _subscriptions(subs, new SubscriptionsHandler(subs, IToken(address(token))));
    }

    function test_subscriptionsHandlerReachesEveryFunction_fiatToken() public {
        vm.warp(1_750_000_000);
        Subscriptions subs = new Subscriptions();
        address usdc = _deployFiatToken();
        SubscriptionsHandler h = new SubscriptionsHandler(subs, IToken(usdc));
        _allowMinting(usdc, address(h));
        _subscriptions(subs, h);
    }

    function _subscriptions(Subscriptions, SubscriptionsHandler h) internal {
        for (uint256 i = 0; i < 2000; i++) {
            uint256 r = uint256(keccak256(abi.encode("subs", i)));
            uint256 f = r % 13;
            uint256 x = r >> 8;
            uint256 y = r >> 40;
            if (f == 0) h.warp(x % 4 == 0 ? x : x % 2 days);
            else if (f == 1) h.fund(x, y);
            else if (f == 2) h.approveSubs(x, y);
            else if (f == 3) h.drain(x, y % 50e6);
            else if (f == 4) h.createPlan(x, y, x >> 8, x % 2 == 0, bytes32(y));
            else if (f == 5 && x % 8 == 0) h.deprecatePlan(x, y);
            else if (f == 6) h.subscribe(x, y, x >> 16);
            else if (f == 7) h.subscribeWithSig(x, y, x >> 16, y >> 16, x >> 24, y >> 24, x % 3 == 0);
            else if (f == 8) h.collect(x, y, x >> 16);
            else if (f == 9) h.chargeOverage(x, y, x >> 16, y >> 16, x >> 24);
            else if (f == 10) h.act(x, uint8(y), x >> 16, y >> 16);
            else if (f == 11) h.actWithSig(x, uint8(y), x >> 16, y >> 16, x >> 24);
            else h.views(x, address(uint160(y)), bytes32(x));
        }
        for (uint256 inv = 0; inv < 13; inv++) {
            h.check(inv, vm.toString(inv));
        }
        bytes4[14] memory sels = [
            Subscriptions.createPlan.selector,
            Subscriptions.deprecatePlan.selector,
            Subscriptions.subscribe.selector,
            Subscriptions.subscribeWithSig.selector,
            Subscriptions.collect.selector,
            Subscriptions.chargeOverage.selector,
            Subscriptions.pause.selector,
            Subscriptions.resume.selector,
            Subscriptions.cancel.selector,
            Subscriptions.raiseAllowance.selector,
            Subscriptions.pauseWithSig.selector,
            Subscriptions.resumeWithSig.selector,
            Subscriptions.cancelWithSig.selector,
            Subscriptions.raiseAllowanceWithSig.selector
        ];
        for (uint256 i = 0; i < sels.length; i++) {
            _assertTrue(h.succeeded(sels[i]) > 0, string.concat("never succeeded: ", vm.toString(bytes32(sels[i]))));
        }
        _assertTrue(h.ghostPulled() > 0, "nothing was pulled");
    }

    function test_paymentRouterHandlerReachesEveryFunction() public {
        vm.warp(1_750_000_000);
        Token token = new Token("USD Coin", "USDC", "2", _create(3));
        PaymentRouter router = new PaymentRouter(address(token), address(0xFEE));
        _router(new PaymentRouterHandler(router, IToken(address(token)), address(0xFEE)));
    }

    function test_paymentRouterHandlerReachesEveryFunction_fiatToken() public {
        vm.warp(1_750_000_000);
        address usdc = _deployFiatToken();
        PaymentRouter router = new PaymentRouter(usdc, address(0xFEE));
        PaymentRouterHandler h = new PaymentRouterHandler(router, IToken(usdc), address(0xFEE));
        _allowMinting(usdc, address(h));
        _router(h);
    }

    function _router(PaymentRouterHandler h) internal {
        for (uint256 i = 0; i < 600; i++) {
            uint256 r = uint256(keccak256(abi.encode("router", i)));
            uint256 f = r % 7;
            uint256 x = r >> 8;
            uint256 y = r >> 40;
            if (f == 0) h.warp(x);
            else if (f == 1) h.fund(x, y);
            else if (f == 2) h.settle(x, y, x >> 16, y >> 16, x >> 24, y >> 24, x >> 32);
            else if (f == 3) h.settleTransfers(x, y % 2 == 0);
            else if (f == 4) h.simulateTransfers(x);
            else if (f == 5) h.simulateTransfer(x);
            else h.views(address(uint160(x)), bytes32(y), x >> 16);
        }
        for (uint256 inv = 0; inv < 8; inv++) {
            h.check(inv, vm.toString(inv));
        }
        _assertTrue(h.succeeded(PaymentRouter.settle.selector) > 0, "settle never succeeded");
        _assertTrue(h.succeeded(PaymentRouter.settleTransfers.selector) > 0, "settleTransfers never succeeded");
        _assertTrue(h.succeeded(PaymentRouter.simulateTransfers.selector) > 0, "simulateTransfers never succeeded");
        _assertTrue(h.settledCount() > 0, "settleTransfers never settled a transfer");
    }
}
