// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @dev The subset of forge's cheatcodes these suites use (forge-std is not used: see TOOLCHAIN.md).
interface Vm {
    struct Log {
        bytes32[] topics;
        bytes data;
        address emitter;
    }

    function warp(uint256 newTimestamp) external;
    function prank(address msgSender) external;
    function addr(uint256 privateKey) external pure returns (address);
    function sign(uint256 privateKey, bytes32 digest) external pure returns (uint8 v, bytes32 r, bytes32 s);
    function recordLogs() external;
    function getRecordedLogs() external returns (Log[] memory);
    function label(address account, string calldata newLabel) external;
    function toString(uint256 value) external pure returns (string memory);
    function toString(bytes32 value) external pure returns (string memory);
    function toString(address value) external pure returns (string memory);
    function toString(bytes calldata value) external pure returns (string memory);
    function expectRevert(bytes4 revertData) external;
    function expectRevert(bytes calldata revertData) external;
    function expectRevert() external;
}

/// @dev What every test and handler shares: the cheatcodes and small helpers.
abstract contract Base {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// @dev `Panic(uint256)`: what a failed assert, an overflow or an out-of-bounds index revert with.
    bytes4 internal constant PANIC = 0x4e487b71;

    function _bound(uint256 x, uint256 min, uint256 max) internal pure returns (uint256) {
        if (max <= min) return min;
        uint256 span = max - min;
        if (span == type(uint256).max) return x;
        return min + (x % (span + 1));
    }

    function _selector(bytes memory ret) internal pure returns (bytes4 sel) {
        if (ret.length < 4) return bytes4(0);
        assembly ("memory-safe") {
            sel := mload(add(ret, 0x20))
        }
    }

    function _sig(uint256 key, bytes32 digest) internal pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
        return abi.encodePacked(r, s, v);
    }

    function _digest(bytes32 domainSeparator, bytes32 structHash) internal pure returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator, structHash));
    }

    function _fail(string memory why) internal pure {
        revert(why);
    }

    function _assertEq(uint256 a, uint256 b, string memory what) internal pure {
        if (a != b) revert(string.concat(what, ": ", vm.toString(a), " != ", vm.toString(b)));
    }

    function _assertTrue(bool ok, string memory what) internal pure {
        if (!ok) revert(what);
    }
}

/// @dev A handler records each invariant it saw broken (count and first description) instead of
///      reverting: forge discards a handler call that reverts, so a revert would hide the breach.
///      The invariant functions of the test read these.
abstract contract Checks is Base {
    uint256 internal constant N = 16;
    uint256[N] public broken;
    string[N] internal firstBreach;
    /// @dev A short description of the current call, for the breach messages.
    string internal callNote;

    function _breach(uint256 inv, string memory why) internal {
        if (broken[inv]++ == 0) firstBreach[inv] = string.concat(why, " [in ", callNote, "]");
    }

    function breach(uint256 inv) external view returns (string memory) {
        return firstBreach[inv];
    }

    /// @dev Reverts (fails the invariant) if invariant `inv` was ever seen broken.
    function check(uint256 inv, string memory name) external view {
        if (broken[inv] != 0) {
            revert(string.concat(name, " broken ", vm.toString(broken[inv]), "x; first: ", firstBreach[inv]));
        }
    }

    function _noPanic(uint256 inv, bool ok, bytes memory ret) internal {
        if (!ok && _selector(ret) == PANIC) {
            uint256 code;
            if (ret.length >= 36) {
                assembly ("memory-safe") {
                    code := mload(add(ret, 0x24))
                }
            }
            _breach(inv, string.concat("panic code ", vm.toString(code)));
        }
    }
}

/// @dev More cheatcodes, for deploying Circle's FiatToken v2.2 from its npm artifacts.
interface VmFiles {
    function readFile(string calldata path) external view returns (string memory);
    function parseJsonString(string calldata json, string calldata key) external pure returns (string memory);
    function parseBytes(string calldata value) external pure returns (bytes memory);
    function replace(string calldata input, string calldata from, string calldata to)
        external
        pure
        returns (string memory);
    function split(string calldata input, string calldata delimiter) external pure returns (string[] memory);
    function getNonce(address account) external view returns (uint64);
}
