// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title IAuthorizationToken
/// @notice The subset of the Tollgate/USDC token interface used by PaymentRouter.
interface IAuthorizationToken {
    /// @notice EIP-3009 receiveWithAuthorization, bytes-signature form.
    /// @param from The payer and signer.
    /// @param to The payee; must be the caller.
    /// @param value The amount.
    /// @param validAfter Valid strictly after this timestamp.
    /// @param validBefore Valid strictly before this timestamp.
    /// @param nonce The authorization nonce.
    /// @param signature The payer's signature.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;

    /// @notice EIP-3009 transferWithAuthorization, bytes-signature form (what x402's `exact`
    ///         scheme settles).
    /// @param from The payer and signer.
    /// @param to The payee.
    /// @param value The amount.
    /// @param validAfter Valid strictly after this timestamp.
    /// @param validBefore Valid strictly before this timestamp.
    /// @param nonce The authorization nonce.
    /// @param signature The payer's signature.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;

    /// @notice ERC-20 transfer.
    /// @param to The recipient.
    /// @param value The amount.
    /// @return success True on success.
    function transfer(address to, uint256 value) external returns (bool success);
}

/// @title PaymentRouter
/// @notice Settles x402 payments signed as EIP-3009 `ReceiveWithAuthorization`s to this contract,
///         splitting each payment between the payee and a fixed fee recipient.
/// @dev No owner and no admin. The authorization nonce is `paymentNonce(payTo, memo, fee)`, so the
///      payer's signature binds the payee, the memo and the fee: anyone may submit `settle`, and a
///      front-runner can only perform exactly the payment the payer signed. Tokens only pass through.
contract PaymentRouter {
    /// @notice One x402 payment: an EIP-3009 `TransferWithAuthorization` signed by `from`.
    struct Transfer {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    /// @notice Gas forwarded to each transfer of `settleTransfers`: one transfer (a plain
    ///         signature's costs about 60-90k) cannot use up the gas of the others.
    uint256 public constant TRANSFER_GAS = 200_000;

    /// @notice The token payments are made in.
    address public immutable token;

    /// @notice The account that receives every payment's fee.
    address public immutable feeRecipient;

    /// @notice Emitted when a payment is settled.
    /// @param memo The payment memo signed by the payer (bound into the nonce).
    /// @param from The payer.
    /// @param payTo The payee, who received `amount - fee`.
    /// @param amount The total amount paid by `from`.
    /// @param fee The part of `amount` sent to `feeRecipient`.
    event PaymentSettled(
        bytes32 indexed memo, address indexed from, address indexed payTo, uint256 amount, uint256 fee
    );

    /// @notice The fee is larger than the amount.
    /// @param amount The payment amount.
    /// @param fee The fee.
    error FeeExceedsAmount(uint256 amount, uint256 fee);

    /// @notice A zero address was given where a real account is required.
    error ZeroAddress();

    /// @notice A payment to this contract itself, which would keep it for good (nothing can take
    ///         tokens out of it): as `payTo` of `settle`, `to` of a transfer, or the fee recipient.
    /// @param payee The refused payee.
    error InvalidPayee(address payee);

    /// @notice The token returned false from a transfer.
    error TransferFailed();

    /// @notice What `simulateTransfer` always reverts with once the transfer went through: the
    ///         simulation changes nothing.
    error Simulated();

    /// @param token_ The payment token (EIP-3009 with bytes signatures).
    /// @param feeRecipient_ The fee recipient.
    constructor(address token_, address feeRecipient_) {
        if (token_ == address(0) || feeRecipient_ == address(0)) revert ZeroAddress();
        if (feeRecipient_ == address(this)) revert InvalidPayee(feeRecipient_);
        token = token_;
        feeRecipient = feeRecipient_;
    }

    /// @notice The EIP-3009 nonce a payer signs for a payment to `payTo` with `memo` and `fee`.
    /// @param payTo The payee.
    /// @param memo The payment memo.
    /// @param fee The fee.
    /// @return The nonce, `keccak256(abi.encode(payTo, memo, fee))`.
    function paymentNonce(address payTo, bytes32 memo, uint256 fee) public pure returns (bytes32) {
        return keccak256(abi.encode(payTo, memo, fee));
    }

    /// @notice Pulls `amount` from `from` with its signed `ReceiveWithAuthorization` (to this contract,
    ///         nonce `paymentNonce(payTo, memo, fee)`), then pays `amount - fee` to `payTo` and `fee`
    ///         to `feeRecipient`. Token errors (bad signature, used nonce, expiry, funds) bubble up unchanged.
    /// @param from The payer and signer.
    /// @param payTo The payee (non-zero, not this contract).
    /// @param amount The total amount.
    /// @param fee The fee, at most `amount`.
    /// @param memo The payment memo.
    /// @param validAfter The authorization is valid strictly after this timestamp.
    /// @param validBefore The authorization is valid strictly before this timestamp.
    /// @param signature The payer's signature (65-byte `r ‖ s ‖ v`, or EIP-1271).
    function settle(
        address from,
        address payTo,
        uint256 amount,
        uint256 fee,
        bytes32 memo,
        uint256 validAfter,
        uint256 validBefore,
        bytes calldata signature
    ) external {
        if (fee > amount) revert FeeExceedsAmount(amount, fee);
        if (payTo == address(0)) revert ZeroAddress();
        if (payTo == address(this)) revert InvalidPayee(payTo);
        IAuthorizationToken(token).receiveWithAuthorization(
            from, address(this), amount, validAfter, validBefore, paymentNonce(payTo, memo, fee), signature
        );
        unchecked {
            _pay(payTo, amount - fee);
        }
        _pay(feeRecipient, fee);
        emit PaymentSettled(memo, from, payTo, amount, fee);
    }

    /// @notice Settles several x402 payments in one transaction: each transfer is the token's own
    ///         `transferWithAuthorization`, called with at most `TRANSFER_GAS`; one that fails
    ///         (used nonce, expiry, funds, signature) is skipped and the others go through. A
    ///         transfer to this contract itself is skipped unsent: nothing could take it out.
    /// @dev The token moves each payment from its payer to its payee directly and emits its own
    ///      `AuthorizationUsed` and `Transfer`: those logs, not this call's success, say which
    ///      payments were settled. Nothing passes through this contract; anyone may call it, and
    ///      can only carry out transfers their payers signed.
    /// @param transfers The payments.
    /// @return settled How many of them went through.
    function settleTransfers(Transfer[] calldata transfers) external returns (uint256 settled) {
        IAuthorizationToken t = IAuthorizationToken(token);
        for (uint256 i = 0; i < transfers.length; ++i) {
            Transfer calldata p = transfers[i];
            address to = p.to;
            if (to == address(this)) continue;
            try t.transferWithAuthorization{gas: TRANSFER_GAS}(
                p.from, to, p.value, p.validAfter, p.validBefore, p.nonce, p.signature
            ) {
                ++settled;
            } catch {}
        }
    }

    /// @notice Runs each transfer as `settleTransfers` would (the token's own
    ///         `transferWithAuthorization`, at most `TRANSFER_GAS`), each alone and undone
    ///         afterwards, and returns what each reverted with: `Simulated()` for one that went
    ///         through, the token's revert data for one it refused (empty when it ran out of gas).
    /// @dev For `eth_call`: a facilitator checks many payments in one call, where one call per
    ///      payment costs the node a call's overhead each. Each transfer runs in a call to
    ///      `simulateTransfer`, which always reverts, so no transfer sees another's effects (two
    ///      payloads with one nonce both pass, as each would alone). Sent as a transaction it
    ///      changes nothing.
    /// @param transfers The payments.
    /// @return results Each transfer's revert data, in order.
    function simulateTransfers(Transfer[] calldata transfers) external returns (bytes[] memory results) {
        results = new bytes[](transfers.length);
        for (uint256 i = 0; i < transfers.length; ++i) {
            try this.simulateTransfer{gas: TRANSFER_GAS}(transfers[i]) {}
            catch (bytes memory data) {
                results[i] = data;
            }
        }
    }

    /// @notice Runs one transfer, then undoes it by reverting with `Simulated()`; a transfer the
    ///         token refuses reverts with the token's data instead, one to this contract (which
    ///         `settleTransfers` skips) with `InvalidPayee`. Always reverts.
    /// @param p The payment.
    function simulateTransfer(Transfer calldata p) external {
        if (p.to == address(this)) revert InvalidPayee(p.to);
        IAuthorizationToken(token).transferWithAuthorization(
            p.from, p.to, p.value, p.validAfter, p.validBefore, p.nonce, p.signature
        );
        revert Simulated();
    }

    /// @dev Transfers `value` of the token to `to`, skipping zero amounts.
    function _pay(address to, uint256 value) private {
        if (value == 0) return;
        if (!IAuthorizationToken(token).transfer(to, value)) revert TransferFailed();
    }
}
