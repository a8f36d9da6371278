// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {HalmosBase} from "./HalmosBase.sol";
import {Token} from "src/Token.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";

/// @notice PaymentRouter.settle's fee split, for all amounts, fees, payees, memos, windows and
///         signatures: payTo receives exactly `amount - fee`, the fee recipient exactly `fee`,
///         the payer pays exactly `amount` and the router keeps nothing (nor pays out of any
///         balance it was sent by mistake).
contract PaymentRouterFeeSplitTest is HalmosBase {
    Token internal token;
    PaymentRouter internal router;
    address internal constant FEE_RECIPIENT = address(0xFEE);
    address internal constant PAYER = address(0xA11CE);

    function setUp() public {
        token = new Token("USD Coin", "USDC", "2", address(this));
        router = new PaymentRouter(address(token), FEE_RECIPIENT);
    }

    /// @dev The balance change of `who` that settle(payer, payTo, amount, fee) must cause.
    function expectedDelta(address who, address payTo, uint256 amount, uint256 fee) internal pure returns (int256 d) {
        if (who == payTo) d += int256(amount - fee);
        if (who == FEE_RECIPIENT) d += int256(fee);
        if (who == PAYER) d -= int256(amount);
    }

    function delta(address who, uint256 before) internal view returns (int256) {
        return int256(token.balanceOf(who)) - int256(before);
    }

    function check_settleSplitsExactly(
        address payTo,
        uint256 amount,
        uint256 fee,
        bytes32 memo,
        uint256 validAfter,
        uint256 validBefore,
        uint256 payerBalance,
        address relayer
    ) public {
        // Balances are bounded by the supply; keep int256 arithmetic of the expectation exact.
        vm.assume(payerBalance < 2 ** 128);
        // payTo may be the router itself (issue 35's finding): settle must refuse it, or the
        // router's balance would grow by `amount - fee`, which the last assertion forbids.
        token.mint(PAYER, payerBalance);
        // Tokens someone sent to the router by mistake must not pay anyone either.
        token.mint(address(router), svm.createUint(128, "routerBalance"));
        bytes memory signature = svm.createBytes(65, "signature");

        uint256 payerBefore = token.balanceOf(PAYER);
        uint256 payToBefore = token.balanceOf(payTo);
        uint256 feeBefore = token.balanceOf(FEE_RECIPIENT);
        uint256 routerBefore = token.balanceOf(address(router));

        vm.prank(relayer);
        router.settle(PAYER, payTo, amount, fee, memo, validAfter, validBefore, signature);

        // Reached only when settle succeeded.
        assert(fee <= amount);
        assert(delta(PAYER, payerBefore) == expectedDelta(PAYER, payTo, amount, fee));
        assert(delta(payTo, payToBefore) == expectedDelta(payTo, payTo, amount, fee));
        assert(delta(FEE_RECIPIENT, feeBefore) == expectedDelta(FEE_RECIPIENT, payTo, amount, fee));
        assert(delta(address(router), routerBefore) == 0);
    }
}
