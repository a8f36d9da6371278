// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Base} from "./Base.sol";
import {Subscriptions} from "src/Subscriptions.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";
import {Token} from "src/Token.sol";

/// @dev One test per external function (and per costly path) of Subscriptions and PaymentRouter,
///      each making that one call after setUp prepared everything else (signatures included), so
///      `forge snapshot` (contracts/forge/.gas-snapshot, checked by scripts/contracts-fuzz) shows
///      what a contract change costs payers. The gas is the test's: the call plus a little overhead.
contract GasTest is Base {
    bytes32 internal constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");
    bytes32 internal constant TRANSFER_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 internal constant RECEIVE_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    Token internal token;
    Subscriptions internal subs;
    PaymentRouter internal router;

    uint256 internal constant KEY = 0xA11CE;
    uint256 internal constant KEY2 = 0xA11CF;
    address internal subscriber;
    address internal subscriber2;
    address internal constant PROVIDER = address(0xB0B0);
    address internal constant OPERATOR = address(0x0BE7);
    address internal constant PAY_TO = address(0xFA70);
    address internal constant FEE = address(0xFEE);
    address internal constant RELAYER = address(0x7E1A);
    uint256 internal constant AMOUNT = 10e6;
    uint64 internal constant INTERVAL = 30 days;
    uint256 internal constant DEADLINE = 2_000_000_000;

    bytes32 internal planId;
    bytes32 internal id; // subscriber's ACTIVE subscription, paid through now + INTERVAL
    bytes32 internal pausedId; // subscriber's PAUSED subscription

    function setUp() public {
        vm.warp(1_750_000_000);
        token = new Token("USD Coin", "USDC", "2", address(this));
        subs = new Subscriptions();
        router = new PaymentRouter(address(token), FEE);
        subscriber = vm.addr(KEY);
        subscriber2 = vm.addr(KEY2);
        token.mint(subscriber, 1_000e6);
        token.mint(subscriber2, 1_000e6);
        vm.prank(subscriber);
        token.approve(address(subs), type(uint256).max);
        vm.prank(PROVIDER);
        planId = subs.createPlan(address(token), PAY_TO, AMOUNT, INTERVAL, OPERATOR, bytes32(0));
        vm.prank(subscriber);
        id = subs.subscribe(planId, 5e6);
        vm.prank(subscriber);
        pausedId = subs.subscribe(planId, 5e6);
        vm.prank(subscriber);
        subs.pause(pausedId);
    }

    function _actionSig(uint256 key, bytes32 sid, uint8 action, uint256 value) internal view returns (bytes memory) {
        uint256 nonce = subs.nonces(vm.addr(key));
        bytes32 structHash = keccak256(abi.encode(subs.ACTION_TYPEHASH(), sid, action, value, nonce, DEADLINE));
        return _sig(key, _digest(subs.DOMAIN_SEPARATOR(), structHash));
    }

    // ---------------------------------------------------------------- Subscriptions

    function test_gas_createPlan() public {
        vm.prank(PROVIDER);
        subs.createPlan(address(token), PAY_TO, AMOUNT, INTERVAL, OPERATOR, bytes32(uint256(1)));
    }

    function test_gas_deprecatePlan() public {
        vm.prank(PROVIDER);
        subs.deprecatePlan(planId);
    }

    function test_gas_subscribe() public {
        vm.prank(subscriber);
        subs.subscribe(planId, 5e6);
    }

    function test_gas_subscribeWithSig_permit() public {
        bytes memory sig = _sig(
            KEY2,
            _digest(
                subs.DOMAIN_SEPARATOR(),
                keccak256(abi.encode(subs.SUBSCRIBE_TYPEHASH(), planId, subscriber2, 5e6, uint256(0), DEADLINE))
            )
        );
        bytes memory permitSig = _sig(
            KEY2,
            _digest(
                token.DOMAIN_SEPARATOR(),
                keccak256(abi.encode(PERMIT_TYPEHASH, subscriber2, address(subs), 180e6, uint256(0), DEADLINE))
            )
        );
        vm.prank(RELAYER);
        subs.subscribeWithSig(planId, subscriber2, 5e6, DEADLINE, sig, 180e6, DEADLINE, permitSig);
    }

    function test_gas_subscribeWithSig_noPermit() public {
        bytes memory sig = _sig(
            KEY,
            _digest(
                subs.DOMAIN_SEPARATOR(),
                keccak256(abi.encode(subs.SUBSCRIBE_TYPEHASH(), planId, subscriber, 5e6, subs.nonces(subscriber), DEADLINE))
            )
        );
        vm.prank(RELAYER);
        subs.subscribeWithSig(planId, subscriber, 5e6, DEADLINE, sig, 0, 0, "");
    }

    function test_gas_collect() public {
        vm.warp(block.timestamp + INTERVAL);
        vm.prank(RELAYER);
        _assertTrue(subs.collect(id, 2), "collected");
    }

    function test_gas_collect_failsAndPauses() public {
        vm.prank(subscriber);
        token.approve(address(subs), 0);
        vm.warp(block.timestamp + INTERVAL);
        vm.prank(RELAYER);
        _assertTrue(!subs.collect(id, 2), "paused");
    }

    function test_gas_chargeOverage() public {
        vm.prank(OPERATOR);
        subs.chargeOverage(id, 1, 1e6, bytes32("ref"));
    }

    function test_gas_pause() public {
        vm.prank(subscriber);
        subs.pause(id);
    }

    function test_gas_resume_notDue() public {
        vm.prank(subscriber);
        subs.resume(pausedId);
    }

    function test_gas_resume_due() public {
        vm.warp(block.timestamp + INTERVAL);
        vm.prank(subscriber);
        subs.resume(pausedId);
    }

    function test_gas_cancel() public {
        vm.prank(subscriber);
        subs.cancel(id);
    }

    function test_gas_raiseAllowance() public {
        vm.prank(subscriber);
        subs.raiseAllowance(id, 6e6);
    }

    function test_gas_pauseWithSig() public {
        bytes memory sig = _actionSig(KEY, id, 1, 0);
        vm.prank(RELAYER);
        subs.pauseWithSig(id, DEADLINE, sig);
    }

    function test_gas_resumeWithSig() public {
        bytes memory sig = _actionSig(KEY, pausedId, 2, 0);
        vm.prank(RELAYER);
        subs.resumeWithSig(pausedId, DEADLINE, sig);
    }

    function test_gas_cancelWithSig() public {
        bytes memory sig = _actionSig(KEY, id, 3, 0);
        vm.prank(RELAYER);
        subs.cancelWithSig(id, DEADLINE, sig);
    }

    function test_gas_raiseAllowanceWithSig() public {
        bytes memory sig = _actionSig(KEY, id, 4, 6e6);
        vm.prank(RELAYER);
        subs.raiseAllowanceWithSig(id, 6e6, DEADLINE, sig);
    }

    function test_gas_subscriptionViews() public view {
        subs.status(id);
        subs.remainingAllowance(id);
        subs.subscriptions(id);
        subs.plans(planId);
        subs.nonces(subscriber);
        subs.chargeApplied(bytes32(0));
        subs.planIdFor(PROVIDER, bytes32(0));
        subs.subscriptionIdFor(planId, subscriber, 0);
        subs.DOMAIN_SEPARATOR();
        subs.SUBSCRIBE_TYPEHASH();
        subs.ACTION_TYPEHASH();
    }

    // ---------------------------------------------------------------- PaymentRouter

    function _receiveSig(uint256 key, address payTo, uint256 amount, uint256 fee, bytes32 memo)
        internal
        view
        returns (bytes memory)
    {
        bytes32 nonce = router.paymentNonce(payTo, memo, fee);
        bytes32 structHash =
            keccak256(abi.encode(RECEIVE_TYPEHASH, vm.addr(key), address(router), amount, 0, DEADLINE, nonce));
        return _sig(key, _digest(token.DOMAIN_SEPARATOR(), structHash));
    }

    function _transfer(uint256 key, address to, uint256 value, bytes32 nonce)
        internal
        view
        returns (PaymentRouter.Transfer memory t)
    {
        t = PaymentRouter.Transfer(vm.addr(key), to, value, 0, DEADLINE, nonce, "");
        bytes32 structHash = keccak256(abi.encode(TRANSFER_TYPEHASH, t.from, to, value, 0, DEADLINE, nonce));
        t.signature = _sig(key, _digest(token.DOMAIN_SEPARATOR(), structHash));
    }

    function test_gas_settle() public {
        bytes memory sig = _receiveSig(KEY, PAY_TO, 10_000, 100, bytes32("memo"));
        vm.prank(RELAYER);
        router.settle(subscriber, PAY_TO, 10_000, 100, bytes32("memo"), 0, DEADLINE, sig);
    }

    function test_gas_settle_noFee() public {
        bytes memory sig = _receiveSig(KEY, PAY_TO, 10_000, 0, bytes32("memo"));
        vm.prank(RELAYER);
        router.settle(subscriber, PAY_TO, 10_000, 0, bytes32("memo"), 0, DEADLINE, sig);
    }

    function test_gas_settleTransfers_1() public {
        PaymentRouter.Transfer[] memory ts = new PaymentRouter.Transfer[](1);
        ts[0] = _transfer(KEY, PAY_TO, 10_000, bytes32(uint256(1)));
        vm.prank(RELAYER);
        _assertEq(router.settleTransfers(ts), 1, "settled");
    }

    function test_gas_settleTransfers_5() public {
        PaymentRouter.Transfer[] memory ts = new PaymentRouter.Transfer[](5);
        for (uint256 i = 0; i < 5; i++) {
            ts[i] = _transfer(i % 2 == 0 ? KEY : KEY2, PAY_TO, 10_000, bytes32(i + 1));
        }
        vm.prank(RELAYER);
        _assertEq(router.settleTransfers(ts), 5, "settled");
    }

    function test_gas_simulateTransfers_1() public {
        PaymentRouter.Transfer[] memory ts = new PaymentRouter.Transfer[](1);
        ts[0] = _transfer(KEY, PAY_TO, 10_000, bytes32(uint256(1)));
        vm.prank(RELAYER);
        router.simulateTransfers(ts);
    }

    function test_gas_simulateTransfer() public {
        PaymentRouter.Transfer memory t = _transfer(KEY, PAY_TO, 10_000, bytes32(uint256(1)));
        vm.prank(RELAYER);
        try router.simulateTransfer(t) {
            _fail("simulateTransfer returned");
        } catch (bytes memory err) {
            _assertTrue(_selector(err) == PaymentRouter.Simulated.selector, "not Simulated()");
        }
    }

    function test_gas_routerViews() public view {
        router.paymentNonce(PAY_TO, bytes32("memo"), 100);
        router.token();
        router.feeRecipient();
        router.TRANSFER_GAS();
    }
}
