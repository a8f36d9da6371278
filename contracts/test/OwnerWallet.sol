// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title OwnerWallet
/// @notice A minimal EIP-1271 smart-contract wallet, for tests only: one owner EOA, whose ECDSA
///         signature over a digest is the wallet's signature. FiatToken v2.2 (and the
///         facilitator) take it as the payer of an EIP-3009 authorization whose `from` is the
///         wallet.
contract OwnerWallet {
    /// @dev `isValidSignature.selector`, what EIP-1271 answers for a valid signature.
    bytes4 internal constant MAGIC_VALUE = 0x1626ba7e;

    /// @dev secp256k1n / 2: a larger `s` is a malleable signature.
    uint256 internal constant HALF_CURVE_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    /// @notice The EOA whose signature is the wallet's.
    address public immutable owner;

    /// @notice A call not sent by the owner.
    error NotOwner();

    /// @notice A call the wallet made reverted.
    /// @param data What it reverted with.
    error CallFailed(bytes data);

    /// @param owner_ The owner.
    constructor(address owner_) {
        owner = owner_;
    }

    /// @notice EIP-1271: whether `signature` is the owner's ECDSA signature (65-byte
    ///         `r ‖ s ‖ v`) over `hash`.
    /// @param hash The signed digest.
    /// @param signature The owner's signature.
    /// @return magicValue `0x1626ba7e` when valid, `0xffffffff` otherwise.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4 magicValue) {
        return _recover(hash, signature) == owner && owner != address(0) ? MAGIC_VALUE : bytes4(0xffffffff);
    }

    /// @notice Calls `to` with `data` and `value`, as the wallet (the owner only).
    /// @param to The callee.
    /// @param value The ether sent.
    /// @param data The calldata.
    /// @return result What the call returned.
    function execute(address to, uint256 value, bytes calldata data) external returns (bytes memory result) {
        if (msg.sender != owner) revert NotOwner();
        bool ok;
        (ok, result) = to.call{value: value}(data);
        if (!ok) revert CallFailed(result);
    }

    /// @dev The signer of a canonical 65-byte signature over `hash`, or zero.
    function _recover(bytes32 hash, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) return address(0);
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (uint256(s) > HALF_CURVE_ORDER || (v != 27 && v != 28)) return address(0);
        return ecrecover(hash, v, r, s);
    }
}
