// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {EIP712} from "./EIP712.sol";
import {SignatureVerifier} from "./SignatureVerifier.sol";

/// @title Token
/// @notice A USDC-compatible ERC-20 token with 6 decimals, EIP-2612 `permit` and EIP-3009
///         transfer/receive/cancel authorizations, following FiatToken v2.2 semantics
///         (without blacklisting, pausing or minter roles).
/// @dev Every signature-taking function exists in two forms: `(…, uint8 v, bytes32 r, bytes32 s)`,
///      verified with ECDSA only, and `(…, bytes signature)`, verified with EIP-1271 when the signer
///      has code and otherwise as a 65-byte `r ‖ s ‖ v` ECDSA signature. ECDSA signatures with a
///      high `s`, a `v` other than 27/28, or recovering to the zero address are rejected.
contract Token is EIP712 {
    /// @notice EIP-2612 permit type hash.
    bytes32 public constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    /// @notice EIP-3009 transferWithAuthorization type hash.
    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    /// @notice EIP-3009 receiveWithAuthorization type hash.
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    /// @notice EIP-3009 cancelAuthorization type hash.
    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");

    /// @notice Number of decimals of the token amount (always 6, as USDC).
    uint8 public constant decimals = 6;

    /// @notice Total amount of tokens in existence.
    uint256 public totalSupply;

    string private _name;
    string private _symbol;
    string private _version;
    address private immutable _owner;

    mapping(address account => uint256) private _balances;
    mapping(address holder => mapping(address spender => uint256)) private _allowances;
    mapping(address holder => uint256) private _nonces;
    mapping(address authorizer => mapping(bytes32 nonce => bool)) private _authorizationStates;

    /// @notice Emitted when `value` tokens move from `from` to `to` (`from` is zero for mints).
    /// @param from The sender.
    /// @param to The recipient.
    /// @param value The amount transferred.
    event Transfer(address indexed from, address indexed to, uint256 value);

    /// @notice Emitted when the allowance of `spender` over `owner`'s tokens is set to `value`.
    /// @param owner The token holder.
    /// @param spender The approved spender.
    /// @param value The new allowance.
    event Approval(address indexed owner, address indexed spender, uint256 value);

    /// @notice Emitted when an EIP-3009 authorization is used.
    /// @param authorizer The signer of the authorization.
    /// @param nonce The authorization nonce.
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

    /// @notice Emitted when an EIP-3009 authorization is canceled.
    /// @param authorizer The signer of the authorization.
    /// @param nonce The authorization nonce.
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    /// @notice `account` holds `balance`, less than the `needed` amount.
    /// @param account The account debited.
    /// @param balance Its balance.
    /// @param needed The amount required.
    error InsufficientFunds(address account, uint256 balance, uint256 needed);

    /// @notice `spender` is allowed `allowance`, less than the `needed` amount.
    /// @param spender The spender.
    /// @param allowance Its allowance.
    /// @param needed The amount required.
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);

    /// @notice The signature is malformed, non-canonical, or not by the expected signer.
    error InvalidSignature();

    /// @notice The authorization is valid only after `validAfter`; the block time is `timestamp`.
    /// @param validAfter The authorization's validAfter.
    /// @param timestamp The current block timestamp.
    error AuthorizationNotYetValid(uint256 validAfter, uint256 timestamp);

    /// @notice The authorization was valid only before `validBefore`; the block time is `timestamp`.
    /// @param validBefore The authorization's validBefore.
    /// @param timestamp The current block timestamp.
    error AuthorizationExpired(uint256 validBefore, uint256 timestamp);

    /// @notice The authorization nonce was already used or canceled.
    /// @param authorizer The signer of the authorization.
    /// @param nonce The authorization nonce.
    error AuthorizationAlreadyUsed(address authorizer, bytes32 nonce);

    /// @notice receiveWithAuthorization was called by someone other than the payee.
    /// @param caller The caller.
    /// @param payee The payee (`to`) of the authorization.
    error CallerMustBePayee(address caller, address payee);

    /// @notice The permit's `deadline` is before the block time `timestamp`.
    /// @param deadline The permit deadline.
    /// @param timestamp The current block timestamp.
    error PermitExpired(uint256 deadline, uint256 timestamp);

    /// @notice `caller` may not call this function.
    /// @param caller The caller.
    error Unauthorized(address caller);

    /// @notice A zero address was given where a real account is required.
    error ZeroAddress();

    /// @param name_ Token name; also the EIP-712 domain name.
    /// @param symbol_ Token symbol.
    /// @param version_ Token version; also the EIP-712 domain version.
    /// @param owner_ The only account allowed to mint.
    constructor(string memory name_, string memory symbol_, string memory version_, address owner_)
        EIP712(name_, version_)
    {
        if (owner_ == address(0)) revert ZeroAddress();
        _name = name_;
        _symbol = symbol_;
        _version = version_;
        _owner = owner_;
    }

    // ---------------------------------------------------------------- views

    /// @notice The token name (also the EIP-712 domain name).
    /// @return The name.
    function name() external view returns (string memory) {
        return _name;
    }

    /// @notice The token symbol.
    /// @return The symbol.
    function symbol() external view returns (string memory) {
        return _symbol;
    }

    /// @notice The token version (also the EIP-712 domain version).
    /// @return The version.
    function version() external view returns (string memory) {
        return _version;
    }

    /// @notice The account allowed to mint.
    /// @return The owner.
    function owner() external view returns (address) {
        return _owner;
    }

    /// @notice The balance of `account`.
    /// @param account The account.
    /// @return The balance.
    function balanceOf(address account) external view returns (uint256) {
        return _balances[account];
    }

    /// @notice The amount `spender` may transfer from `owner`.
    /// @param owner The token holder.
    /// @param spender The spender.
    /// @return The allowance.
    function allowance(address owner, address spender) external view returns (uint256) {
        return _allowances[owner][spender];
    }

    /// @notice The next EIP-2612 permit nonce of `owner`.
    /// @param owner The token holder.
    /// @return The nonce.
    function nonces(address owner) external view returns (uint256) {
        return _nonces[owner];
    }

    /// @notice Whether the EIP-3009 authorization `nonce` of `authorizer` is used or canceled.
    /// @param authorizer The signer.
    /// @param nonce The authorization nonce.
    /// @return True if used or canceled.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationStates[authorizer][nonce];
    }

    /// @notice The EIP-712 domain separator for the current chain.
    /// @return The domain separator.
    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparator();
    }

    /// @notice The EIP-712 domain, per EIP-5267.
    /// @return fields 0x0f: name, version, chainId and verifyingContract are set.
    /// @return domainName The domain name.
    /// @return domainVersion The domain version.
    /// @return chainId The current chain id.
    /// @return verifyingContract This contract.
    /// @return salt Unused (zero).
    /// @return extensions Unused (empty).
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory domainName,
            string memory domainVersion,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", _name, _version, block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    // ---------------------------------------------------------------- ERC-20

    /// @notice Sets the allowance of `spender` over the caller's tokens to `value`.
    /// @param spender The spender (non-zero).
    /// @param value The new allowance.
    /// @return Always true.
    function approve(address spender, uint256 value) external returns (bool) {
        _approve(msg.sender, spender, value);
        return true;
    }

    /// @notice Moves `value` tokens from the caller to `to`.
    /// @param to The recipient (non-zero).
    /// @param value The amount.
    /// @return Always true.
    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    /// @notice Moves `value` tokens from `from` to `to` using the caller's allowance.
    /// @dev As FiatToken, the allowance is always decreased (no infinite-allowance special case)
    ///      and no Approval event is emitted.
    /// @param from The holder.
    /// @param to The recipient (non-zero).
    /// @param value The amount.
    /// @return Always true.
    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = _allowances[from][msg.sender];
        if (allowed < value) revert InsufficientAllowance(msg.sender, allowed, value);
        unchecked {
            _allowances[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    /// @notice Creates `amount` tokens for `to`. Only the owner may mint.
    /// @param to The recipient (non-zero).
    /// @param amount The amount.
    function mint(address to, uint256 amount) external {
        if (msg.sender != _owner) revert Unauthorized(msg.sender);
        if (to == address(0)) revert ZeroAddress();
        totalSupply += amount;
        unchecked {
            _balances[to] += amount;
        }
        emit Transfer(address(0), to, amount);
    }

    // ---------------------------------------------------------------- EIP-2612

    /// @notice Sets `spender`'s allowance over `owner`'s tokens to `value` with `owner`'s signature.
    /// @param owner The token holder and signer.
    /// @param spender The spender.
    /// @param value The new allowance.
    /// @param deadline The last timestamp at which the permit is valid.
    /// @param v Signature recovery id (27 or 28).
    /// @param r Signature r.
    /// @param s Signature s.
    function permit(
        address owner,
        address spender,
        uint256 value,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        bytes32 digest = _usePermitNonce(owner, spender, value, deadline);
        if (!SignatureVerifier.isValidECDSA(owner, digest, v, r, s)) revert InvalidSignature();
        _approve(owner, spender, value);
    }

    /// @notice Sets `spender`'s allowance over `owner`'s tokens to `value` with `owner`'s signature.
    /// @param owner The token holder and signer.
    /// @param spender The spender.
    /// @param value The new allowance.
    /// @param deadline The last timestamp at which the permit is valid.
    /// @param signature A 65-byte `r ‖ s ‖ v` signature, or an EIP-1271 signature if `owner` has code.
    function permit(address owner, address spender, uint256 value, uint256 deadline, bytes memory signature)
        external
    {
        bytes32 digest = _usePermitNonce(owner, spender, value, deadline);
        if (!SignatureVerifier.isValidNow(owner, digest, signature)) revert InvalidSignature();
        _approve(owner, spender, value);
    }

    // ---------------------------------------------------------------- EIP-3009

    /// @notice Transfers `value` from `from` to `to` with `from`'s signed authorization.
    /// @param from The payer and signer.
    /// @param to The payee.
    /// @param value The amount.
    /// @param validAfter The authorization is valid strictly after this timestamp.
    /// @param validBefore The authorization is valid strictly before this timestamp.
    /// @param nonce A unique 32-byte nonce chosen by the signer.
    /// @param v Signature recovery id (27 or 28).
    /// @param r Signature r.
    /// @param s Signature s.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        bytes32 digest = _authorizationDigest(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce
        );
        if (!SignatureVerifier.isValidECDSA(from, digest, v, r, s)) revert InvalidSignature();
        _markAuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    /// @notice Transfers `value` from `from` to `to` with `from`'s signed authorization.
    /// @param from The payer and signer.
    /// @param to The payee.
    /// @param value The amount.
    /// @param validAfter The authorization is valid strictly after this timestamp.
    /// @param validBefore The authorization is valid strictly before this timestamp.
    /// @param nonce A unique 32-byte nonce chosen by the signer.
    /// @param signature A 65-byte `r ‖ s ‖ v` signature, or an EIP-1271 signature if `from` has code.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        bytes32 digest = _authorizationDigest(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce
        );
        if (!SignatureVerifier.isValidNow(from, digest, signature)) revert InvalidSignature();
        _markAuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    /// @notice Receives `value` from `from` with `from`'s signed authorization; the caller must be `to`.
    /// @param from The payer and signer.
    /// @param to The payee; must be the caller.
    /// @param value The amount.
    /// @param validAfter The authorization is valid strictly after this timestamp.
    /// @param validBefore The authorization is valid strictly before this timestamp.
    /// @param nonce A unique 32-byte nonce chosen by the signer.
    /// @param v Signature recovery id (27 or 28).
    /// @param r Signature r.
    /// @param s Signature s.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        if (to != msg.sender) revert CallerMustBePayee(msg.sender, to);
        bytes32 digest = _authorizationDigest(
            RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce
        );
        if (!SignatureVerifier.isValidECDSA(from, digest, v, r, s)) revert InvalidSignature();
        _markAuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    /// @notice Receives `value` from `from` with `from`'s signed authorization; the caller must be `to`.
    /// @param from The payer and signer.
    /// @param to The payee; must be the caller.
    /// @param value The amount.
    /// @param validAfter The authorization is valid strictly after this timestamp.
    /// @param validBefore The authorization is valid strictly before this timestamp.
    /// @param nonce A unique 32-byte nonce chosen by the signer.
    /// @param signature A 65-byte `r ‖ s ‖ v` signature, or an EIP-1271 signature if `from` has code.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        if (to != msg.sender) revert CallerMustBePayee(msg.sender, to);
        bytes32 digest = _authorizationDigest(
            RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce
        );
        if (!SignatureVerifier.isValidNow(from, digest, signature)) revert InvalidSignature();
        _markAuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    /// @notice Cancels the unused authorization `nonce` of `authorizer` with its signature.
    /// @param authorizer The signer.
    /// @param nonce The authorization nonce to cancel.
    /// @param v Signature recovery id (27 or 28).
    /// @param r Signature r.
    /// @param s Signature s.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external {
        bytes32 digest = _cancelDigest(authorizer, nonce);
        if (!SignatureVerifier.isValidECDSA(authorizer, digest, v, r, s)) revert InvalidSignature();
        _markAuthorizationCanceled(authorizer, nonce);
    }

    /// @notice Cancels the unused authorization `nonce` of `authorizer` with its signature.
    /// @param authorizer The signer.
    /// @param nonce The authorization nonce to cancel.
    /// @param signature A 65-byte `r ‖ s ‖ v` signature, or an EIP-1271 signature if `authorizer` has code.
    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external {
        bytes32 digest = _cancelDigest(authorizer, nonce);
        if (!SignatureVerifier.isValidNow(authorizer, digest, signature)) revert InvalidSignature();
        _markAuthorizationCanceled(authorizer, nonce);
    }

    // ---------------------------------------------------------------- internals

    function _transfer(address from, address to, uint256 value) private {
        if (to == address(0)) revert ZeroAddress();
        uint256 balance = _balances[from];
        if (balance < value) revert InsufficientFunds(from, balance, value);
        unchecked {
            _balances[from] = balance - value;
            // Cannot overflow: the sum of all balances is totalSupply.
            _balances[to] += value;
        }
        emit Transfer(from, to, value);
    }

    function _approve(address holder, address spender, uint256 value) private {
        if (holder == address(0) || spender == address(0)) revert ZeroAddress();
        _allowances[holder][spender] = value;
        emit Approval(holder, spender, value);
    }

    /// @dev Checks the permit deadline, consumes `owner`'s nonce and returns the digest to verify.
    function _usePermitNonce(address holder, address spender, uint256 value, uint256 deadline)
        private
        returns (bytes32)
    {
        if (deadline < block.timestamp) revert PermitExpired(deadline, block.timestamp);
        uint256 nonce = _nonces[holder]++;
        return _hashTypedData(keccak256(abi.encode(PERMIT_TYPEHASH, holder, spender, value, nonce, deadline)));
    }

    /// @dev Checks the validity window and nonce of an authorization and returns the digest to verify.
    function _authorizationDigest(
        bytes32 typehash,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce
    ) private view returns (bytes32) {
        if (block.timestamp <= validAfter) revert AuthorizationNotYetValid(validAfter, block.timestamp);
        if (block.timestamp >= validBefore) revert AuthorizationExpired(validBefore, block.timestamp);
        _requireUnusedAuthorization(from, nonce);
        return _hashTypedData(keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce)));
    }

    /// @dev Checks that the nonce is unused and returns the cancel digest to verify.
    function _cancelDigest(address authorizer, bytes32 nonce) private view returns (bytes32) {
        _requireUnusedAuthorization(authorizer, nonce);
        return _hashTypedData(keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)));
    }

    function _requireUnusedAuthorization(address authorizer, bytes32 nonce) private view {
        if (_authorizationStates[authorizer][nonce]) revert AuthorizationAlreadyUsed(authorizer, nonce);
    }

    function _markAuthorizationUsed(address authorizer, bytes32 nonce) private {
        _authorizationStates[authorizer][nonce] = true;
        emit AuthorizationUsed(authorizer, nonce);
    }

    function _markAuthorizationCanceled(address authorizer, bytes32 nonce) private {
        _authorizationStates[authorizer][nonce] = true;
        emit AuthorizationCanceled(authorizer, nonce);
    }
}
