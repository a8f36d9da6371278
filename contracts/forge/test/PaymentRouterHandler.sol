// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {Checks, Vm} from "./Base.sol";
import {PaymentRouter} from "src/PaymentRouter.sol";
import {IToken} from "./SubscriptionsHandler.sol";

/// @dev An EIP-1271 payer whose signature check burns all the gas it is given: it must not be able
///      to make the other members of a settleTransfers batch fail.
contract GasBurner {
    function isValidSignature(bytes32, bytes memory) external view returns (bytes4) {
        uint256 x;
        while (gasleft() > 0) x++;
        return bytes4(uint32(x));
    }
}

/// @dev Drives every external function of PaymentRouter with payers (with keys), payees, a fee
///      recipient, relayers, an attacker with no rights and time jumps, and checks each call against
///      a model of what the payers signed (see PaymentRouterInvariants).
contract PaymentRouterHandler is Checks {
    uint256 internal constant HOLDS_NOTHING = 0; // the router holds no token after any call
    uint256 internal constant EXACT_SPLIT = 1; // settle pays amount - fee to payTo, fee to feeRecipient
    uint256 internal constant ONLY_SIGNED = 2; // only transfers their payers signed are carried out
    uint256 internal constant ISOLATION = 3; // in a batch, one member cannot fail/double/redirect another
    uint256 internal constant NO_PANIC = 4; // nothing ends in a panic code
    uint256 internal constant OUTSIDER = 5; // no outsider call moves a third party's funds
    uint256 internal constant SIMULATION = 6; // simulateTransfers changes nothing and says what would pass
    uint256 internal constant LIVENESS = 7; // a valid, funded, fresh payment goes through

    bytes32 internal constant TRANSFER_TYPEHASH = keccak256(
        "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );
    bytes32 internal constant RECEIVE_TYPEHASH = keccak256(
        "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
    );

    PaymentRouter public immutable router;
    IToken public immutable token;
    address public immutable feeRecipient;
    uint256[3] internal payerKeys;
    address[3] public payers;
    address[3] public payees;
    address public immutable relayer;
    address public immutable attacker;
    uint256 internal immutable attackerKey;
    address public immutable burner;
    address[] internal parties;

    /// @dev Transfers settled before (for replays).
    PaymentRouter.Transfer[] internal settledBefore;
    mapping(bytes4 selector => uint256) public succeeded;
    uint256 public settledCount;
    uint256 public calls;

    constructor(PaymentRouter router_, IToken token_, address feeRecipient_) {
        router = router_;
        token = token_;
        feeRecipient = feeRecipient_;
        for (uint256 i = 0; i < 3; i++) {
            payerKeys[i] = 0xCAFE + i;
            payers[i] = vm.addr(payerKeys[i]);
            payees[i] = address(uint160(0xBEE0 + i));
            parties.push(payers[i]);
            parties.push(payees[i]);
        }
        relayer = address(0x7E1A);
        attackerKey = 0xBAD;
        attacker = vm.addr(attackerKey);
        burner = address(new GasBurner());
        parties.push(feeRecipient_);
        parties.push(relayer);
        parties.push(attacker);
        parties.push(burner);
        parties.push(address(router_));
    }

    function warp(uint256 secs) external {
        callNote = "warp";
        vm.warp(block.timestamp + _bound(secs, 0, 3 days));
    }

    function fund(uint256 who, uint256 amount) external {
        callNote = "fund";
        amount = _bound(amount, 0, 1e12);
        if (amount > 0) token.mint(who % 4 == 3 ? burner : payers[who % 3], amount); // FiatToken refuses 0
    }

    // ------------------------------------------------------------------ settle

    struct SettleArgs {
        uint256 payer;
        address payTo;
        uint256 amount;
        uint256 fee;
        bytes32 memo;
        uint256 validAfter;
        uint256 validBefore;
        uint256 tamper;
        bytes sig;
        address subPayTo;
        uint256 subAmount;
        uint256 subFee;
        bool expectOk;
        bool fresh;
    }

    /// @dev tamper: 0 as signed; 1 another payTo submitted; 2 another fee; 3 another amount;
    ///      4 signed by the attacker; 5 submitted by the attacker as signed (allowed: anyone may).
    function settle(uint256 payerSeed, uint256 payToSeed, uint256 amount, uint256 fee, uint256 memoSeed, uint256 window, uint256 tamper)
        external
    {
        SettleArgs memory a;
        a.payer = payerSeed % 3;
        a.payTo = payToSeed % 5 == 4 ? attacker : payees[payToSeed % 3];
        a.amount = amount % 9 == 0 ? amount : _bound(amount, 0, 1e9);
        a.fee = fee % 7 == 0 ? fee : _bound(fee, 0, a.amount + 1);
        a.memo = bytes32(memoSeed % 6); // few memos: replays happen
        (a.validAfter, a.validBefore) = _window(window);
        a.tamper = tamper % 6;
        _sign(a);
        // What is submitted.
        a.subPayTo = a.tamper == 1 ? (a.payTo == payees[0] ? payees[1] : payees[0]) : a.payTo;
        a.subFee = a.tamper == 2 ? (a.fee == 0 ? 1 : a.fee - 1) : a.fee;
        a.subAmount = a.tamper == 3 ? (a.amount == type(uint256).max ? 0 : a.amount + 1) : a.amount;
        _settle(a);
    }

    function _sign(SettleArgs memory a) internal view {
        bytes32 nonce = router.paymentNonce(a.payTo, a.memo, a.fee);
        a.sig = _sig(
            a.tamper == 4 ? attackerKey : payerKeys[a.payer],
            _digest(
                token.DOMAIN_SEPARATOR(),
                keccak256(
                    abi.encode(
                        RECEIVE_TYPEHASH, payers[a.payer], address(router), a.amount, a.validAfter, a.validBefore, nonce
                    )
                )
            )
        );
        a.fresh = !token.authorizationState(payers[a.payer], nonce);
        a.expectOk = (a.tamper == 0 || a.tamper == 5) && a.fresh && token.balanceOf(payers[a.payer]) >= a.amount
            && block.timestamp > a.validAfter && block.timestamp < a.validBefore && a.fee <= a.amount;
    }

    function _settle(SettleArgs memory a) internal {
        callNote = string.concat("settle tamper ", vm.toString(a.tamper));
        bytes memory data = abi.encodeCall(
            PaymentRouter.settle,
            (payers[a.payer], a.subPayTo, a.subAmount, a.subFee, a.memo, a.validAfter, a.validBefore, a.sig)
        );
        uint256[] memory b0 = _balances();
        vm.recordLogs();
        (bool ok, bytes memory ret) = _call(a.tamper == 5 ? attacker : relayer, data);
        Vm.Log[] memory logs = vm.getRecordedLogs();
        uint256[] memory b1 = _balances();
        if (ok && a.tamper >= 1 && a.tamper <= 4) _breach(ONLY_SIGNED, "settle carried out a payment not as signed");
        if (ok) {
            _expectDelta(b0, b1, payers[a.payer], a.subPayTo, a.subAmount, a.subFee);
            if (!a.fresh) _breach(ONLY_SIGNED, "settle paid a used authorization twice");
            _checkSettledEvent(logs, a, a.subPayTo);
        } else {
            _expectNoDelta(b0, b1, "a failed settle moved funds");
            if (a.expectOk) _breach(LIVENESS, string.concat("a valid settle reverted: ", vm.toString(ret)));
        }
    }

    function _checkSettledEvent(Vm.Log[] memory logs, SettleArgs memory a, address payTo) internal {
        bytes32 topic = keccak256("PaymentSettled(bytes32,address,address,uint256,uint256)");
        uint256 n;
        for (uint256 i = 0; i < logs.length; i++) {
            if (logs[i].emitter != address(router) || logs[i].topics[0] != topic) continue;
            n++;
            (uint256 amount, uint256 fee) = abi.decode(logs[i].data, (uint256, uint256));
            if (
                logs[i].topics[1] != a.memo || address(uint160(uint256(logs[i].topics[2]))) != payers[a.payer]
                    || address(uint160(uint256(logs[i].topics[3]))) != payTo || amount != a.amount || fee != a.fee
            ) _breach(EXACT_SPLIT, "PaymentSettled does not report the payment");
        }
        if (n != 1) _breach(EXACT_SPLIT, "not exactly one PaymentSettled");
    }

    // ------------------------------------------------------------------ settleTransfers / simulate

    /// @dev A batch of up to 6 transfers of several kinds: 0-2 valid, 3 signed by the attacker,
    ///      4 a copy of an earlier member, 5 expired or not yet valid, 6 over the payer's balance,
    ///      7 a replay of a transfer settled in an earlier call, 8 value changed after signing,
    ///      9 from the gas-burning EIP-1271 payer.
    function _batch(uint256 seed) internal view returns (PaymentRouter.Transfer[] memory ts, bool[] memory signed) {
        uint256 n = 1 + seed % 6;
        ts = new PaymentRouter.Transfer[](n);
        signed = new bool[](n);
        for (uint256 i = 0; i < n; i++) {
            seed = uint256(keccak256(abi.encode(seed, i)));
            uint256 kind = seed % 10;
            uint256 p = (seed >> 8) % 3;
            PaymentRouter.Transfer memory t;
            t.from = payers[p];
            t.to = (seed >> 16) % 7 == 0 ? feeRecipient : payees[(seed >> 24) % 3];
            t.value = _bound(seed >> 32, 0, 5e8);
            (t.validAfter, t.validBefore) = kind == 5 ? _window(3) : _window(1);
            t.nonce = keccak256(abi.encode("n", seed >> 40));
            signed[i] = kind != 3 && kind != 8 && kind != 9;
            if (kind == 4 && i > 0) {
                t = ts[i - 1];
                signed[i] = signed[i - 1];
            } else if (kind == 6) {
                t.value = token.balanceOf(t.from) + 1;
            } else if (kind == 7 && settledBefore.length > 0) {
                t = settledBefore[(seed >> 48) % settledBefore.length];
            } else if (kind == 9) {
                t.from = burner;
            }
            if (!(kind == 4 && i > 0) && !(kind == 7 && settledBefore.length > 0)) {
                uint256 key = kind == 3 ? attackerKey : payerKeys[p];
                uint256 signedValue = kind == 8 ? t.value + 1 : t.value;
                t.signature = _sig(
                    key,
                    _digest(
                        token.DOMAIN_SEPARATOR(),
                        keccak256(
                            abi.encode(TRANSFER_TYPEHASH, t.from, t.to, signedValue, t.validAfter, t.validBefore, t.nonce)
                        )
                    )
                );
            }
            ts[i] = t;
        }
    }

    /// @dev Whether `t` would go through now on its own (nonce, window, funds, signature).
    function _wouldPass(PaymentRouter.Transfer memory t, bool signed, uint256 balance, bool used)
        internal
        view
        returns (bool)
    {
        return signed && !used && t.from != burner && block.timestamp > t.validAfter
            && block.timestamp < t.validBefore && balance >= t.value;
    }

    function settleTransfers(uint256 seed, bool byAttacker) external {
        (PaymentRouter.Transfer[] memory ts, bool[] memory signed) = _batch(seed);
        // The model: members in order, each against the effects of the earlier ones.
        int256[] memory want = new int256[](parties.length);
        bool[] memory pass = new bool[](ts.length);
        uint256 expected;
        for (uint256 i = 0; i < ts.length; i++) {
            PaymentRouter.Transfer memory t = ts[i];
            bool used = token.authorizationState(t.from, t.nonce);
            for (uint256 j = 0; j < i; j++) {
                if (pass[j] && ts[j].from == t.from && ts[j].nonce == t.nonce) used = true;
            }
            uint256 fromIdx = _indexOf(t.from);
            uint256 balance = uint256(int256(token.balanceOf(t.from)) + want[fromIdx]);
            pass[i] = _wouldPass(t, signed[i], balance, used);
            if (pass[i]) {
                expected++;
                want[fromIdx] -= int256(t.value);
                want[_indexOf(t.to)] += int256(t.value);
            }
        }
        callNote = string.concat("settleTransfers of ", vm.toString(ts.length));
        uint256[] memory b0 = _balances();
        (bool ok, bytes memory ret) =
            _call(byAttacker ? attacker : relayer, abi.encodeCall(PaymentRouter.settleTransfers, (ts)));
        uint256[] memory b1 = _balances();
        if (!ok) {
            _breach(ISOLATION, "settleTransfers reverted");
            return;
        }
        uint256 settled = abi.decode(ret, (uint256));
        if (settled != expected) {
            _breach(ISOLATION, string.concat("settled ", vm.toString(settled), ", expected ", vm.toString(expected)));
        }
        for (uint256 k = 0; k < parties.length; k++) {
            if (int256(b1[k]) - int256(b0[k]) != want[k]) {
                _breach(ISOLATION, string.concat("party ", vm.toString(parties[k]), " moved other than signed"));
            }
        }
        for (uint256 i = 0; i < ts.length; i++) {
            if (pass[i]) settledBefore.push(ts[i]);
        }
        settledCount += settled;
    }

    function simulateTransfers(uint256 seed) external {
        (PaymentRouter.Transfer[] memory ts, bool[] memory signed) = _batch(seed);
        bool[] memory used0 = new bool[](ts.length);
        for (uint256 i = 0; i < ts.length; i++) {
            used0[i] = token.authorizationState(ts[i].from, ts[i].nonce);
        }
        callNote = string.concat("simulateTransfers of ", vm.toString(ts.length));
        uint256[] memory b0 = _balances();
        (bool ok, bytes memory ret) = _call(relayer, abi.encodeCall(PaymentRouter.simulateTransfers, (ts)));
        uint256[] memory b1 = _balances();
        _expectNoDelta(b0, b1, "simulateTransfers moved funds");
        if (!ok) {
            _breach(SIMULATION, "simulateTransfers reverted");
            return;
        }
        bytes[] memory results = abi.decode(ret, (bytes[]));
        for (uint256 i = 0; i < ts.length; i++) {
            if (token.authorizationState(ts[i].from, ts[i].nonce) != used0[i]) {
                _breach(SIMULATION, "simulateTransfers used a nonce");
            }
            bool passes = _wouldPass(ts[i], signed[i], token.balanceOf(ts[i].from), used0[i]);
            bool simulated = _selector(results[i]) == PaymentRouter.Simulated.selector;
            if (passes != simulated) _breach(SIMULATION, "simulateTransfers' answer differs from the model");
            if (_selector(results[i]) == PANIC) _breach(NO_PANIC, "a simulated transfer panicked");
        }
    }

    function simulateTransfer(uint256 seed) external {
        (PaymentRouter.Transfer[] memory ts,) = _batch(seed);
        callNote = "simulateTransfer";
        uint256[] memory b0 = _balances();
        (bool ok,) = _call(attacker, abi.encodeCall(PaymentRouter.simulateTransfer, (ts[0])));
        _expectNoDelta(b0, _balances(), "simulateTransfer moved funds");
        if (ok) _breach(SIMULATION, "simulateTransfer did not revert");
    }

    function views(address a, bytes32 memo, uint256 fee) external {
        callNote = "views";
        bytes[4] memory data = [
            abi.encodeCall(PaymentRouter.paymentNonce, (a, memo, fee)),
            abi.encodeWithSignature("token()"),
            abi.encodeWithSignature("feeRecipient()"),
            abi.encodeWithSignature("TRANSFER_GAS()")
        ];
        for (uint256 i = 0; i < data.length; i++) {
            (bool ok, bytes memory ret) = address(router).staticcall(data[i]);
            if (!ok) _breach(NO_PANIC, "a view reverted");
            _noPanic(NO_PANIC, ok, ret);
        }
        if (router.paymentNonce(a, memo, fee) != keccak256(abi.encode(a, memo, fee))) {
            _breach(ONLY_SIGNED, "paymentNonce is not keccak256(abi.encode(payTo, memo, fee))");
        }
    }

    // ------------------------------------------------------------------ helpers

    function _call(address caller, bytes memory data) internal returns (bool ok, bytes memory ret) {
        calls++;
        vm.prank(caller);
        // Enough for a batch of 6 at TRANSFER_GAS each; the gas-burning payer must not eat forge's
        // default (2^63) when simulateTransfer is called directly.
        (ok, ret) = address(router).call{gas: 3_000_000}(data);
        _noPanic(NO_PANIC, ok, ret);
        if (ok) succeeded[_selector(data)]++;
        if (token.balanceOf(address(router)) != 0) _breach(HOLDS_NOTHING, "the router holds tokens");
    }

    function _window(uint256 seed) internal view returns (uint256 validAfter, uint256 validBefore) {
        uint256 m = seed % 8;
        if (m == 3) return (block.timestamp + 100, block.timestamp + 1 days); // not yet valid
        if (m == 5) return (0, block.timestamp); // expired
        return (block.timestamp - 1 - (seed % 1000), block.timestamp + 1 + (seed % 3 days));
    }

    function _expectDelta(
        uint256[] memory b0,
        uint256[] memory b1,
        address from,
        address payTo,
        uint256 amount,
        uint256 fee
    ) internal {
        for (uint256 i = 0; i < parties.length; i++) {
            int256 want;
            if (parties[i] == from) want -= int256(amount);
            if (parties[i] == payTo) want += int256(amount - fee);
            if (parties[i] == feeRecipient) want += int256(fee);
            if (int256(b1[i]) - int256(b0[i]) != want) {
                _breach(EXACT_SPLIT, string.concat("settle moved ", vm.toString(parties[i]), "'s balance wrongly"));
            }
        }
    }

    function _expectNoDelta(uint256[] memory b0, uint256[] memory b1, string memory why) internal {
        for (uint256 i = 0; i < parties.length; i++) {
            if (b0[i] != b1[i]) _breach(OUTSIDER, why);
        }
    }

    function _indexOf(address a) internal view returns (uint256) {
        for (uint256 i = 0; i < parties.length; i++) {
            if (parties[i] == a) return i;
        }
        revert("not a party");
    }

    function _balances() internal view returns (uint256[] memory b) {
        b = new uint256[](parties.length);
        for (uint256 i = 0; i < parties.length; i++) {
            b[i] = token.balanceOf(parties[i]);
        }
    }
}
