// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @dev The hevm cheatcodes halmos implements (a subset of forge's `Vm`), at forge's address.
interface Vm {
    function prank(address sender) external;
    function startPrank(address sender) external;
    function stopPrank() external;
    function warp(uint256 timestamp) external;
    function assume(bool condition) external;
    function store(address target, bytes32 slot, bytes32 value) external;
}

/// @dev halmos' own cheatcodes (symbolic values), at `address(bytes20(uint160(uint256(keccak256("svm cheat code")))))`.
interface SVM {
    function createUint(uint256 bits, string calldata name) external returns (uint256);
    function createUint256(string calldata name) external returns (uint256);
    function createBytes32(string calldata name) external returns (bytes32);
    function createAddress(string calldata name) external returns (address);
    function createBool(string calldata name) external returns (bool);
    function createBytes(uint256 length, string calldata name) external returns (bytes memory);
}

/// @dev The base of the halmos tests: cheatcodes and helpers, no forge-std (see TOOLCHAIN.md).
///      halmos reports a `check_*` function as failed when an `assert` can be violated for some
///      input; paths that revert elsewhere are not counterexamples (a reverted call changes nothing).
abstract contract HalmosBase {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));
    SVM internal constant svm = SVM(address(uint160(uint256(keccak256("svm cheat code")))));

    /// @dev secp256k1n / 2, as SignatureVerifier.
    uint256 internal constant HALF_CURVE_ORDER = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    /// @dev `keccak256("\x19\x01" ‖ domainSeparator ‖ structHash)`, computed here independently of
    ///      the contracts' EIP712.
    function typedDigest(string memory name, string memory version, address verifying, bytes32 structHash)
        internal
        view
        returns (bytes32)
    {
        bytes32 domain = keccak256(
            abi.encode(
                keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"),
                keccak256(bytes(name)),
                keccak256(bytes(version)),
                block.chainid,
                verifying
            )
        );
        return keccak256(abi.encodePacked("\x19\x01", domain, structHash));
    }

    /// @dev Whether the 65-byte `r ‖ s ‖ v` `signature` is a canonical ECDSA signature by `signer`
    ///      over `digest` (halmos models ecrecover as an uninterpreted function: the only way for a
    ///      signature to recover to `signer` is for the solver to make it so, which stands for
    ///      "the holder of signer's key signed this digest").
    function signedBy(address signer, bytes32 digest, bytes memory signature) internal pure returns (bool) {
        if (signature.length != 65) return false;
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly ("memory-safe") {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        return ecrecover(digest, v, r, s) == signer;
    }
}
