// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title EIP712
/// @notice Minimal EIP-712 domain handling shared by Tollgate contracts.
/// @dev The domain is `EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)`.
///      The separator is cached for the deployment chain id and recomputed if the chain id changes
///      (for example after a fork), so signatures never replay across chains.
abstract contract EIP712 {
    /// @dev keccak256 of the EIP-712 domain type string.
    bytes32 internal constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    bytes32 private immutable _hashedName;
    bytes32 private immutable _hashedVersion;
    uint256 private immutable _cachedChainId;
    bytes32 private immutable _cachedDomainSeparator;

    /// @param name_ The EIP-712 domain name.
    /// @param version_ The EIP-712 domain version.
    constructor(string memory name_, string memory version_) {
        bytes32 hashedName = keccak256(bytes(name_));
        bytes32 hashedVersion = keccak256(bytes(version_));
        _hashedName = hashedName;
        _hashedVersion = hashedVersion;
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator(hashedName, hashedVersion);
    }

    /// @dev The domain separator for the current chain id.
    function _domainSeparator() internal view returns (bytes32) {
        if (block.chainid == _cachedChainId) {
            return _cachedDomainSeparator;
        }
        return _buildDomainSeparator(_hashedName, _hashedVersion);
    }

    /// @dev The EIP-712 digest `keccak256("\x19\x01" ‖ domainSeparator ‖ structHash)`.
    function _hashTypedData(bytes32 structHash) internal view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", _domainSeparator(), structHash));
    }

    function _buildDomainSeparator(bytes32 hashedName, bytes32 hashedVersion) private view returns (bytes32) {
        return keccak256(abi.encode(EIP712_DOMAIN_TYPEHASH, hashedName, hashedVersion, block.chainid, address(this)));
    }
}
