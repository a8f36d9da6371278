//! The Tollgate proof path: what a proof must pay for ([`Expected`]), and
//! [`Gate::verify_payment_proof`] (offline against the facilitator's published signers, and
//! on-chain when [`GateBuilder::on_chain`](super::GateBuilder::on_chain) is set).

use alloy::{
    primitives::{Address, B256},
    sol_types::SolEvent,
};
use tollgate_chain::{Chain, contracts::PaymentRouter};
use tollgate_protocol::{Amount, PaymentProof, network, x402::SettlementResponseHeader};

use super::{Gate, unix_now};
use crate::{
    InvalidProof,
    memo::{self, MemoCheck},
};

/// What a proof must pay for ([`Gate::verify_payment_proof`]).
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The request's method.
    pub method: &'a str,
    /// The request's path (`/v1/quote`, no query), as in the 402 whose memo the proof carries.
    pub resource: &'a str,
    /// The one-time price.
    pub price: Amount,
}

/// A proof that paid for this request; its memo is now spent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// Who paid.
    pub payer: Address,
    /// Gross amount paid.
    pub amount: Amount,
    /// The settlement transaction.
    pub tx_hash: B256,
    /// The network.
    pub network: String,
    /// The memo spent.
    pub memo: B256,
}

impl VerifiedPayment {
    /// The `X-PAYMENT-RESPONSE` header for the paid response.
    pub fn settlement_header(&self) -> SettlementResponseHeader {
        SettlementResponseHeader {
            success: true,
            transaction: self.tx_hash.to_string(),
            network: self.network.clone(),
            payer: Some(self.payer),
        }
    }
}

impl Gate {
    /// The spec's `verifyPaymentProof`: checks that `proof` pays for the request described by
    /// `expected`, then spends its memo (at most once, atomically, across every gate sharing the
    /// memo store).
    ///
    /// Checks, in order: the proof's expiry; network, token and payee; amount ≥ price; the memo
    /// (issued by this gate for this method, resource, price, payee and network; not expired);
    /// the facilitator's EIP-712 signature, against the signers it publishes at
    /// `/.well-known/tollgate` (cached); in on-chain mode, the settlement event; and finally that
    /// the memo was not used before. Nothing is spent unless every check passed.
    ///
    /// ```no_run
    /// use tollgate_gate::{Expected, Gate, parse_payment_proof};
    ///
    /// # async fn handle(gate: &Gate, x_payment: &str) -> Result<(), Box<dyn std::error::Error>> {
    /// let proof = parse_payment_proof(x_payment)?;
    /// let expected = Expected { method: "GET", resource: "/v1/quote", price: 500_000u64.into() };
    /// match gate.verify_payment_proof(&proof, &expected).await {
    ///     Ok(paid) => println!("paid by {} in {}", paid.payer, paid.tx_hash),
    ///     Err(reason) => println!("402 again: {}", reason.code()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn verify_payment_proof(
        &self,
        proof: &PaymentProof,
        expected: &Expected<'_>,
    ) -> Result<VerifiedPayment, InvalidProof> {
        let i = &self.inner;
        let now = unix_now();
        if proof.expiry <= now {
            return Err(InvalidProof::Expired {
                expiry: proof.expiry,
            });
        }
        if !network::same_network(&proof.network, &i.network) {
            return Err(InvalidProof::WrongNetwork {
                expected: i.network.to_string(),
                found: proof.network.to_string(),
            });
        }
        if proof.token != i.token {
            return Err(InvalidProof::WrongToken {
                expected: i.token,
                found: proof.token,
            });
        }
        if proof.pay_to != i.pay_to {
            return Err(InvalidProof::WrongPayee {
                expected: i.pay_to,
                found: proof.pay_to,
            });
        }
        if proof.amount < expected.price {
            return Err(InvalidProof::Underpaid {
                price: expected.price,
                paid: proof.amount,
            });
        }
        let terms = self.terms(expected.method, expected.resource, expected.price);
        let memo_expiry = match memo::check(&i.secret, &terms, &proof.memo, now) {
            Ok(e) => e,
            Err(MemoCheck::Forged) => return Err(InvalidProof::MemoForgedOrForeign),
            Err(MemoCheck::Expired(expiry)) => return Err(InvalidProof::MemoExpired { expiry }),
        };
        let signer = match tollgate_chain::proof::recover(proof) {
            Ok(s) if s == proof.signer => s,
            _ => return Err(InvalidProof::BadSignature),
        };
        let (known, info) = i
            .facilitator
            .is_signer(signer)
            .await
            .map_err(InvalidProof::FacilitatorUnavailable)?;
        if !known {
            return Err(InvalidProof::UnknownSigner(signer));
        }
        let published = info.network(&i.network);
        if let Some(n) = published
            && n.chain_id != proof.chain_id
        {
            return Err(InvalidProof::WrongNetwork {
                expected: format!("{} (chain {})", i.network, n.chain_id),
                found: format!("{} (chain {})", proof.network, proof.chain_id),
            });
        }
        if let Some(chain) = &i.chain {
            check_on_chain(&**chain, proof, published.map(|n| n.router)).await?;
        }
        self.maybe_prune(now);
        match i.store.claim(proof.memo, memo_expiry).await {
            Ok(true) => Ok(VerifiedPayment {
                payer: proof.payer,
                amount: proof.amount,
                tx_hash: proof.tx_hash,
                network: proof.network.to_string(),
                memo: proof.memo,
            }),
            Ok(false) => Err(InvalidProof::Replayed),
            Err(e) => Err(InvalidProof::StoreUnavailable(e)),
        }
    }
}

async fn check_on_chain(
    chain: &dyn Chain,
    proof: &PaymentProof,
    router: Option<Address>,
) -> Result<(), InvalidProof> {
    if chain.chain_id() != proof.chain_id {
        return Err(InvalidProof::WrongNetwork {
            expected: format!("chain {}", chain.chain_id()),
            found: format!("chain {}", proof.chain_id),
        });
    }
    let receipt = chain
        .receipt(proof.tx_hash)
        .await
        .map_err(InvalidProof::ChainUnavailable)?
        .ok_or(InvalidProof::NotSettledOnChain("no such transaction"))?;
    if !receipt.success {
        return Err(InvalidProof::NotSettledOnChain("the transaction reverted"));
    }
    let settled = receipt
        .logs
        .iter()
        .filter(|l| router.is_none_or(|r| l.address == r))
        .filter_map(|l| PaymentRouter::PaymentSettled::decode_log(l).ok())
        .any(|ev| {
            ev.memo == proof.memo
                && ev.from == proof.payer
                && ev.payTo == proof.pay_to
                && ev.amount == proof.amount.get()
                && ev.fee == proof.fee.get()
        });
    if settled {
        Ok(())
    } else {
        Err(InvalidProof::NotSettledOnChain(
            "no matching PaymentSettled event",
        ))
    }
}
