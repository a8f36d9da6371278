// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {HalmosBase} from "./HalmosBase.sol";
import {Token} from "src/Token.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";

interface SVMCalldataSigner {
    function createCalldata(string calldata contractName) external returns (bytes memory);
}

/// @dev An EIP-1271 subscriber that approves exactly the digests it was told to.
contract ApprovingWallet {
    mapping(bytes32 digest => bool) public approved;

    function approve(bytes32 digest) external {
        approved[digest] = true;
    }

    function isValidSignature(bytes32 digest, bytes memory) external view returns (bytes4) {
        return approved[digest] ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }
}

/// @notice "Only the signer": a change of a subscription by signature, and a payment through
///         EIP-3009, succeeds only with the subscriber's (payer's) signature over exactly that
///         change, for every signature (any length, any bytes), relayer and deadline.
/// @dev halmos models ecrecover as an uninterpreted function, so a symbolic signature "recovers to
///      the subscriber over digest d" only as a free choice of the solver: the assertion
///      `signedBy(subscriber, d, sig)` after a successful call says that the contract accepted
///      nothing but a signature the subscriber's key made over d, where d is the EIP-712 digest
///      this test computes itself (this subscription, this action and value, the subscriber's
///      current nonce, this deadline, this contract and chain). The nonce then advances, so the
///      same signature never verifies again.
contract OnlyTheSignerTest is HalmosBase {
    Token internal token;
    Subscriptions internal subs;
    PaymentRouter internal router;
    ApprovingWallet internal wallet;

    address internal constant PROVIDER = address(0x9A0);
    address internal constant PAY_TO = address(0x9A1);
    address internal constant SUB = address(0x5B5);
    address internal constant SUB2 = address(0x5B6);
    address internal constant FEE_RECIPIENT = address(0xFEE);
    address internal constant PAYER = address(0xA11CE);

    bytes32 internal planId;
    bytes32 internal id; // SUB's ACTIVE subscription
    bytes32 internal walletId; // the wallet's ACTIVE subscription

    bytes32 internal constant ACTION_TYPEHASH =
        keccak256("Action(bytes32 id,uint8 action,uint256 value,uint256 nonce,uint256 deadline)");
    bytes32 internal constant SUBSCRIBE_TYPEHASH =
        keccak256("Subscribe(bytes32 planId,address subscriber,uint256 maxOverage,uint256 nonce,uint256 deadline)");
    bytes32 internal constant RECEIVE_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    function setUp() public {
        token = new Token("USD Coin", "USDC", "2", address(this));
        subs = new Subscriptions();
        router = new PaymentRouter(address(token), FEE_RECIPIENT);
        wallet = new ApprovingWallet();

        vm.prank(PROVIDER);
        planId = subs.createPlan(address(token), PAY_TO, 10e6, 30 days, address(0), bytes32(0));

        token.mint(SUB, 1000e6);
        vm.prank(SUB);
        token.approve(address(subs), type(uint256).max);
        vm.prank(SUB);
        id = subs.subscribe(planId, 5e6);

        token.mint(SUB2, 1000e6);
        vm.prank(SUB2);
        token.approve(address(subs), type(uint256).max);

        token.mint(address(wallet), 1000e6);
        vm.prank(address(wallet));
        token.approve(address(subs), type(uint256).max);
        vm.prank(address(wallet));
        walletId = subs.subscribe(planId, 5e6);
    }

    function actionDigest(bytes32 sid, uint8 action, uint256 value, uint256 nonce, uint256 deadline)
        internal
        view
        returns (bytes32)
    {
        return typedDigest(
            "Tollgate Subscriptions",
            "1",
            address(subs),
            keccak256(abi.encode(ACTION_TYPEHASH, sid, action, value, nonce, deadline))
        );
    }

    function state(bytes32 sid) internal view returns (uint8 s) {
        (s,) = subs.status(sid);
    }

    function check_pauseWithSig(address relayer, uint256 deadline, bytes calldata sig) public {
        uint256 nonce = subs.nonces(SUB);
        vm.prank(relayer);
        subs.pauseWithSig(id, deadline, sig);
        assert(signedBy(SUB, actionDigest(id, 1, 0, nonce, deadline), sig));
        assert(block.timestamp <= deadline);
        assert(subs.nonces(SUB) == nonce + 1);
        assert(state(id) == 2);
    }

    function check_resumeWithSig(address relayer, uint256 deadline, bytes calldata sig) public {
        vm.prank(SUB);
        subs.pause(id);
        uint256 nonce = subs.nonces(SUB);
        vm.prank(relayer);
        subs.resumeWithSig(id, deadline, sig);
        assert(signedBy(SUB, actionDigest(id, 2, 0, nonce, deadline), sig));
        assert(block.timestamp <= deadline);
        assert(subs.nonces(SUB) == nonce + 1);
        assert(state(id) == 1);
    }

    function check_cancelWithSig(address relayer, uint256 deadline, bytes calldata sig) public {
        uint256 nonce = subs.nonces(SUB);
        vm.prank(relayer);
        subs.cancelWithSig(id, deadline, sig);
        assert(signedBy(SUB, actionDigest(id, 3, 0, nonce, deadline), sig));
        assert(block.timestamp <= deadline);
        assert(subs.nonces(SUB) == nonce + 1);
        assert(state(id) == 3);
    }

    function check_raiseAllowanceWithSig(address relayer, uint256 newMax, uint256 deadline, bytes calldata sig)
        public
    {
        uint256 nonce = subs.nonces(SUB);
        vm.prank(relayer);
        subs.raiseAllowanceWithSig(id, newMax, deadline, sig);
        assert(signedBy(SUB, actionDigest(id, 4, newMax, nonce, deadline), sig));
        assert(block.timestamp <= deadline);
        assert(subs.nonces(SUB) == nonce + 1);
        assert(subs.remainingAllowance(id) == newMax);
    }

    /// @dev The same signature never works twice: after a successful pauseWithSig and resume, a
    ///      second pauseWithSig with the same bytes needs the subscriber's signature over the
    ///      next nonce's digest too.
    function check_noReplay(address relayer, uint256 deadline, bytes calldata sig) public {
        uint256 nonce = subs.nonces(SUB);
        vm.prank(relayer);
        subs.pauseWithSig(id, deadline, sig);
        vm.prank(SUB);
        subs.resume(id);
        vm.prank(relayer);
        subs.pauseWithSig(id, deadline, sig);
        assert(signedBy(SUB, actionDigest(id, 1, 0, nonce, deadline), sig));
        assert(signedBy(SUB, actionDigest(id, 1, 0, nonce + 1, deadline), sig));
    }

    function check_subscribeWithSig(address relayer, uint256 maxOverage, uint256 deadline, bytes calldata sig) public {
        uint256 nonce = subs.nonces(SUB2);
        uint256 balance = token.balanceOf(SUB2);
        vm.prank(relayer);
        bytes32 newId = subs.subscribeWithSig(planId, SUB2, maxOverage, deadline, sig, 0, 0, "");
        bytes32 digest = typedDigest(
            "Tollgate Subscriptions",
            "1",
            address(subs),
            keccak256(abi.encode(SUBSCRIBE_TYPEHASH, planId, SUB2, maxOverage, nonce, deadline))
        );
        assert(signedBy(SUB2, digest, sig));
        assert(block.timestamp <= deadline);
        assert(subs.nonces(SUB2) == nonce + 1);
        assert(newId == subs.subscriptionIdFor(planId, SUB2, nonce));
        assert(balance - token.balanceOf(SUB2) == 10e6);
    }

    /// @dev An EIP-1271 subscriber: the change goes through only if the wallet approves exactly
    ///      that change's digest (the wallet approves one arbitrary digest `approvedDigest`).
    function check_cancelWithSigContractSubscriber(address relayer, bytes32 approvedDigest, uint256 deadline, bytes calldata sig)
        public
    {
        wallet.approve(approvedDigest);
        uint256 nonce = subs.nonces(address(wallet));
        vm.prank(relayer);
        subs.cancelWithSig(walletId, deadline, sig);
        assert(approvedDigest == actionDigest(walletId, 3, 0, nonce, deadline));
        assert(subs.nonces(address(wallet)) == nonce + 1);
    }

    /// @dev The EIP-3009 path: PaymentRouter.settle moves the payer's funds only with the payer's
    ///      ReceiveWithAuthorization signature to the router whose nonce binds payTo, memo and fee.
    function check_settleOnlyWithPayerSignature(
        address payTo,
        uint256 amount,
        uint256 fee,
        uint256 validAfter,
        uint256 validBefore,
        bytes calldata sig
    ) public {
        bytes32 memo = svm.createBytes32("memo");
        token.mint(PAYER, amount);
        vm.prank(svm.createAddress("relayer"));
        router.settle(PAYER, payTo, amount, fee, memo, validAfter, validBefore, sig);
        bytes32 authNonce = keccak256(abi.encode(payTo, memo, fee));
        assert(signedBy(PAYER, receiveDigest(amount, validAfter, validBefore, authNonce), sig));
        assert(token.authorizationState(PAYER, authNonce));
    }

    function receiveDigest(uint256 amount, uint256 validAfter, uint256 validBefore, bytes32 authNonce)
        internal
        view
        returns (bytes32)
    {
        return typedDigest(
            "USD Coin",
            "2",
            address(token),
            keccak256(abi.encode(RECEIVE_TYPEHASH, PAYER, address(router), amount, validAfter, validBefore, authNonce))
        );
    }

    /// @dev No other way: ANY call of ANY external function of Subscriptions (halmos'
    ///      createCalldata, any arguments) by anyone but the subscriber changes the subscription's
    ///      state or cap only through the *WithSig functions proven above, or (state only) by a
    ///      collect that could not pull the renewal and paused it; its plan and subscriber never
    ///      change. The subscription may be ACTIVE or PAUSED, at any time.
    function check_outsiderAnyCall() public {
        if (svm.createBool("paused")) {
            vm.prank(SUB);
            subs.pause(id);
        }
        vm.warp(svm.createUint(64, "now"));
        (bytes32 plan0, address sub0, uint8 state0,,, uint256 max0,) = subs.subscriptions(id);
        bytes memory data = SVMCalldataSigner(address(svm)).createCalldata("Subscriptions");
        address caller = svm.createAddress("caller");
        vm.assume(caller != SUB);
        vm.prank(caller);
        (bool ok,) = address(subs).call(data);
        vm.assume(ok);
        (bytes32 plan1, address sub1, uint8 state1,,, uint256 max1,) = subs.subscriptions(id);
        bytes4 sel = bytes4(data);
        assert(plan1 == plan0 && sub1 == sub0);
        if (max1 != max0) assert(sel == Subscriptions.raiseAllowanceWithSig.selector);
        if (state1 != state0) {
            assert(
                sel == Subscriptions.pauseWithSig.selector || sel == Subscriptions.resumeWithSig.selector
                    || sel == Subscriptions.cancelWithSig.selector
                    || (sel == Subscriptions.collect.selector && state1 == 2)
            );
        }
    }
}
