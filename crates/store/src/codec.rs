//! The stored form of the store's values, shared by both backends: hashes and addresses as
//! lowercase `0x`-hex text, amounts as decimal text, `u64`s as `BIGINT`. Reading back is strict:
//! anything that is not exactly what the writer produces is [`StoreError::Corrupt`].

use std::str::FromStr;

use alloy::primitives::{Address, B256, hex};
use tollgate_protocol::{Amount, Network, SettlementStatus};

use crate::{NewSettlement, PlanOwner, Settlement, SettlementKind, StoreError, StoreResult};

/// The settlement columns, in the order of [`SettlementRow`] (for `SELECT` and `RETURNING`); a
/// macro so that statements are `&'static str` built with `concat!`.
macro_rules! settlement_columns {
    () => {
        "key, kind, request_hash, network, chain_id, token, payer, pay_to, amount, fee, memo, \
         nonce, valid_before, request, status, tx_hash, block, proof, error, created_at, updated_at, \
         resource, claim_hash"
    };
}
pub(crate) use settlement_columns;

/// Every status, in the order `count_by_status()` reports them.
pub(crate) const ALL_STATUSES: [SettlementStatus; 5] = [
    SettlementStatus::Received,
    SettlementStatus::Submitted,
    SettlementStatus::Pending,
    SettlementStatus::Confirmed,
    SettlementStatus::Failed,
];

/// `0x` + 64 lowercase hex digits.
pub(crate) fn b256(v: &B256) -> String {
    hex::encode_prefixed(v)
}

/// `0x` + 40 lowercase hex digits (not the checksummed form: one spelling per address, so
/// equality in SQL is equality of addresses).
pub(crate) fn address(v: &Address) -> String {
    hex::encode_prefixed(v)
}

/// A `u64` for a `BIGINT` column; beyond `i64::MAX` is refused (an encode error), not wrapped.
pub(crate) fn int(what: &'static str, v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| {
        StoreError::Database(sqlx::Error::Encode(
            format!("{what} {v} exceeds the BIGINT range").into(),
        ))
    })
}

/// `valid_before` for its `BIGINT` column. It is already saturated to `u64::MAX` upstream (a
/// `uint256` beyond `u64` means "never expires"); anything beyond `i64::MAX` (the year 292
/// billion) is stored as `i64::MAX` and read back as `u64::MAX`, so the saturated value round-trips
/// and ordering by expiry stays right. The exact value is in the stored `request`.
pub(crate) fn valid_before(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `as_str` (the stored name) and `parse` (its inverse; anything else is
/// [`StoreError::Corrupt`] naming `column`) for an enum stored by name:
/// `stored_names!(Type, "column", { Variant => "name", ... })`.
macro_rules! stored_names {
    ($ty:ident, $column:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The stored name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }

            /// The value stored as `s`.
            pub(crate) fn parse(s: &str) -> $crate::StoreResult<Self> {
                match s {
                    $($name => Ok(Self::$variant),)+
                    other => Err($crate::StoreError::Corrupt(format!(
                        concat!($column, " = {:.40}"),
                        other
                    ))),
                }
            }
        }
    };
}
pub(crate) use stored_names;

fn corrupt(column: &str, value: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{column} = {value:.80}"))
}

fn strict_hex<const N: usize>(column: &str, s: &str) -> StoreResult<[u8; N]> {
    let digits = s.strip_prefix("0x").ok_or_else(|| corrupt(column, s))?;
    if digits.len() != 2 * N
        || !digits
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(corrupt(column, s));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(digits, &mut out).map_err(|_| corrupt(column, s))?;
    Ok(out)
}

pub(crate) fn parse_b256(column: &str, s: &str) -> StoreResult<B256> {
    strict_hex::<32>(column, s).map(B256::from)
}

pub(crate) fn parse_address(column: &str, s: &str) -> StoreResult<Address> {
    strict_hex::<20>(column, s).map(Address::from)
}

/// A stored network name as a [`Network`] (every one was a configured network's name).
pub(crate) fn parse_network(column: &str, s: &str) -> StoreResult<Network> {
    Network::parse(s).map_err(|_| corrupt(column, s))
}

fn parse_u64(column: &str, v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| corrupt(column, v))
}

fn parse_amount(column: &str, s: &str) -> StoreResult<Amount> {
    let amount = Amount::from_str(s).map_err(|_| corrupt(column, s))?;
    // One spelling per amount: "007" would parse but is not what we write.
    if amount.to_string() != s {
        return Err(corrupt(column, s));
    }
    Ok(amount)
}

pub(crate) fn parse_status(s: &str) -> StoreResult<SettlementStatus> {
    SettlementStatus::parse(s).ok_or_else(|| corrupt("status", s))
}

fn parse_kind(s: &str) -> StoreResult<SettlementKind> {
    match s {
        "router" => Ok(SettlementKind::Router),
        "x402" => Ok(SettlementKind::X402),
        _ => Err(corrupt("kind", s)),
    }
}

/// The values of a [`NewSettlement`] as bound, in column order (status, tx_hash, block, proof
/// and error are set by the statement; `updated_at` is `created_at`).
#[derive(Debug)]
pub(crate) struct NewRow {
    pub(crate) key: String,
    pub(crate) kind: &'static str,
    pub(crate) request_hash: String,
    pub(crate) chain_id: i64,
    pub(crate) token: String,
    pub(crate) payer: String,
    pub(crate) pay_to: String,
    pub(crate) amount: String,
    pub(crate) fee: String,
    pub(crate) memo: String,
    pub(crate) nonce: String,
    pub(crate) valid_before: i64,
    pub(crate) resource: Option<String>,
    pub(crate) claim_hash: Option<String>,
    pub(crate) created_at: i64,
}

impl NewRow {
    pub(crate) fn encode(new: &NewSettlement) -> StoreResult<Self> {
        Ok(Self {
            key: b256(&new.key),
            kind: new.kind.as_str(),
            request_hash: b256(&new.request_hash),
            chain_id: int("chain id", new.chain_id)?,
            token: address(&new.token),
            payer: address(&new.payer),
            pay_to: address(&new.pay_to),
            amount: new.amount.to_string(),
            fee: new.fee.to_string(),
            memo: b256(&new.memo),
            nonce: b256(&new.nonce),
            valid_before: valid_before(new.valid_before),
            resource: new.resource.clone(),
            claim_hash: new.claim_hash.as_ref().map(b256),
            created_at: int("created_at", new.created_at)?,
        })
    }
}

/// A settlement row as the database returns it.
#[derive(Debug)]
pub(crate) struct SettlementRow {
    key: String,
    kind: String,
    request_hash: String,
    network: String,
    chain_id: i64,
    token: String,
    payer: String,
    pay_to: String,
    amount: String,
    fee: String,
    memo: String,
    nonce: String,
    valid_before: i64,
    request: String,
    status: String,
    tx_hash: Option<String>,
    block: Option<i64>,
    proof: Option<String>,
    error: Option<String>,
    created_at: i64,
    updated_at: i64,
    resource: Option<String>,
    claim_hash: Option<String>,
}

// What `#[derive(sqlx::FromRow)]` writes, by hand: the derive needs `sqlx-macros`, which compiled
// both drivers (SQLite's C source included) a second time for the macro's own use.
impl<'r, R: sqlx::Row> sqlx::FromRow<'r, R> for SettlementRow
where
    &'r str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        Ok(Self {
            key: row.try_get("key")?,
            kind: row.try_get("kind")?,
            request_hash: row.try_get("request_hash")?,
            network: row.try_get("network")?,
            chain_id: row.try_get("chain_id")?,
            token: row.try_get("token")?,
            payer: row.try_get("payer")?,
            pay_to: row.try_get("pay_to")?,
            amount: row.try_get("amount")?,
            fee: row.try_get("fee")?,
            memo: row.try_get("memo")?,
            nonce: row.try_get("nonce")?,
            valid_before: row.try_get("valid_before")?,
            request: row.try_get("request")?,
            status: row.try_get("status")?,
            tx_hash: row.try_get("tx_hash")?,
            block: row.try_get("block")?,
            proof: row.try_get("proof")?,
            error: row.try_get("error")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            resource: row.try_get("resource")?,
            claim_hash: row.try_get("claim_hash")?,
        })
    }
}

impl SettlementRow {
    /// Its key, as stored.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Decodes the row; any value the writer would not have produced is `Corrupt`.
    pub(crate) fn decode(self) -> StoreResult<Settlement> {
        let valid_before = if self.valid_before == i64::MAX {
            u64::MAX
        } else {
            parse_u64("valid_before", self.valid_before)?
        };
        let new = NewSettlement {
            key: parse_b256("key", &self.key)?,
            kind: parse_kind(&self.kind)?,
            request_hash: parse_b256("request_hash", &self.request_hash)?,
            network: self.network,
            chain_id: parse_u64("chain_id", self.chain_id)?,
            token: parse_address("token", &self.token)?,
            payer: parse_address("payer", &self.payer)?,
            pay_to: parse_address("pay_to", &self.pay_to)?,
            amount: parse_amount("amount", &self.amount)?,
            fee: parse_amount("fee", &self.fee)?,
            memo: parse_b256("memo", &self.memo)?,
            nonce: parse_b256("nonce", &self.nonce)?,
            valid_before,
            request: self.request,
            resource: self.resource,
            claim_hash: self
                .claim_hash
                .as_deref()
                .map(|s| parse_b256("claim_hash", s))
                .transpose()?,
            created_at: parse_u64("created_at", self.created_at)?,
        };
        Ok(Settlement {
            new,
            status: parse_status(&self.status)?,
            tx_hash: self
                .tx_hash
                .as_deref()
                .map(|s| parse_b256("tx_hash", s))
                .transpose()?,
            block: self.block.map(|b| parse_u64("block", b)).transpose()?,
            proof: self.proof,
            error: self.error,
            updated_at: parse_u64("updated_at", self.updated_at)?,
        })
    }
}

/// Puts counts in the order of [`ALL_STATUSES`], with zero for a status no row has (so a
/// metrics gauge drops to zero instead of disappearing).
pub(crate) fn status_counts(rows: Vec<(String, i64)>) -> StoreResult<Vec<(SettlementStatus, u64)>> {
    let mut counts = ALL_STATUSES.map(|s| (s, 0u64));
    for (status, n) in rows {
        let status = parse_status(&status)?;
        let n = parse_u64("count", n)?;
        if let Some(slot) = counts.iter_mut().find(|(s, _)| *s == status) {
            slot.1 = n;
        }
    }
    Ok(counts.to_vec())
}

/// A `plans` row as selected: network, plan id, provider, relayer, created at.
pub(crate) type PlanRow = (String, String, String, String, i64);

/// Encodes a plan owner's key columns: plan id, provider, relayer, created at.
pub(crate) fn encode_plan(p: &PlanOwner) -> StoreResult<(String, String, String, i64)> {
    Ok((
        b256(&p.plan_id),
        address(&p.provider),
        address(&p.relayer),
        int("created_at", p.created_at)?,
    ))
}

/// Decodes a `plans` row.
pub(crate) fn decode_plan(row: PlanRow) -> StoreResult<PlanOwner> {
    let (network, plan_id, provider, relayer, created_at) = row;
    Ok(PlanOwner {
        network,
        plan_id: parse_b256("plan_id", &plan_id)?,
        provider: parse_address("provider", &provider)?,
        relayer: parse_address("relayer", &relayer)?,
        created_at: u64::try_from(created_at)
            .map_err(|_| StoreError::Corrupt(format!("created_at {created_at} is negative")))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_strict() {
        let b = B256::repeat_byte(0xab);
        assert_eq!(parse_b256("k", &b256(&b)).unwrap(), b);
        let a = Address::repeat_byte(0xcd);
        assert_eq!(parse_address("a", &address(&a)).unwrap(), a);
        let bad = [
            String::new(),
            "0x".to_owned(),
            "ab".repeat(32),
            format!("0x{}", "AB".repeat(32)),
            format!("0x{}", "ab".repeat(33)),
            format!(" 0x{}", "ab".repeat(32)),
        ];
        for bad in &bad {
            assert!(
                matches!(parse_b256("k", bad), Err(StoreError::Corrupt(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn amounts_have_one_spelling() {
        assert_eq!(
            parse_amount("a", "500000").unwrap(),
            Amount::from_units(500_000)
        );
        for bad in ["007", "", "-1", "1.0", "1e3"] {
            assert!(
                matches!(parse_amount("a", bad), Err(StoreError::Corrupt(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn valid_before_saturates_and_round_trips_the_sentinel() {
        assert_eq!(valid_before(u64::MAX), i64::MAX);
        assert_eq!(valid_before(1_700_000_000), 1_700_000_000);
        assert!(int("x", u64::MAX).is_err());
    }
}
