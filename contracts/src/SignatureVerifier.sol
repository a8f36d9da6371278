// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title IERC1271
/// @notice EIP-1271 standard signature validation for contract accounts.
interface IERC1271 {
    /// @notice Whether `signature` is a valid signature by this contract over `hash`.
    /// @param hash The signed digest.
    /// @param signature The signature bytes, in the contract's own format.
    /// @return magicValue `0x1626ba7e` when valid.
    function isValidSignature(bytes32 hash, bytes memory signature) external view returns (bytes4 magicValue);
}

/// @title SignatureVerifier
/// @notice Signature checks shared by Tollgate contracts.
/// @dev ECDSA (secp256k1) signatures are rejected when `s` is in the upper half of the curve order
///      (EIP-2 malleability), when `v` is not 27 or 28, and when recovery yields the zero address.
///      Contract signers (accounts with code) are verified with EIP-1271 instead, as FiatToken v2.2 does.
library SignatureVerifier {
    /// @dev secp256k1n / 2.
    uint256 internal constant HALF_CURVE_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    /// @dev `IERC1271.isValidSignature.selector`.
    bytes4 internal constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    /// @dev True iff (v, r, s) is a canonical ECDSA signature over `digest` by `signer`.
    function isValidECDSA(address signer, bytes32 digest, uint8 v, bytes32 r, bytes32 s)
        internal
        pure
        returns (bool)
    {
        if (uint256(s) > HALF_CURVE_ORDER) return false;
        if (v != 27 && v != 28) return false;
        address recovered = ecrecover(digest, v, r, s);
        return recovered != address(0) && recovered == signer;
    }

    /// @dev True iff `signature` is valid for `signer` over `digest`: EIP-1271 when `signer` has code,
    ///      otherwise a 65-byte `r ‖ s ‖ v` ECDSA signature.
    function isValidNow(address signer, bytes32 digest, bytes memory signature) internal view returns (bool) {
        if (signer.code.length > 0) {
            return isValidERC1271(signer, digest, signature);
        }
        if (signature.length != 65) return false;
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly ("memory-safe") {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        return isValidECDSA(signer, digest, v, r, s);
    }

    /// @dev True iff `signer.isValidSignature(digest, signature)` returns the EIP-1271 magic value.
    function isValidERC1271(address signer, bytes32 digest, bytes memory signature) internal view returns (bool) {
        (bool ok, bytes memory ret) =
            signer.staticcall(abi.encodeCall(IERC1271.isValidSignature, (digest, signature)));
        return ok && ret.length >= 32 && abi.decode(ret, (bytes32)) == bytes32(ERC1271_MAGIC_VALUE);
    }
}
