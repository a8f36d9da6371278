//! The label values of the facilitator's series: fixed sets, so that label cardinality stays
//! bounded.

/// How a payment was settled: `path` label of the settlement metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettlementPath {
    /// `POST /authorize`, through the `PaymentRouter`.
    Router,
    /// x402 V1 `POST /settle`, `transferWithAuthorization` straight to `payTo`.
    X402,
}

impl SettlementPath {
    pub(super) const ALL: [Self; 2] = [Self::Router, Self::X402];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Router => "router",
            Self::X402 => "x402",
        }
    }
}

/// How a settlement request ended: `outcome` label of `tollgate_settlements_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettlementOutcome {
    /// Confirmed; a proof (or x402 success) was returned.
    Confirmed,
    /// Broadcast, answered `202 pending` before confirmation.
    Pending,
    /// Broadcast and failed (reverted, dropped).
    Failed,
    /// Refused before broadcast (invalid signature, terms, funds, replay).
    Rejected,
}

impl SettlementOutcome {
    pub(super) const ALL: [Self; 4] =
        [Self::Confirmed, Self::Pending, Self::Failed, Self::Rejected];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Confirmed => "confirmed",
            Self::Pending => "pending",
            Self::Failed => "failed",
            Self::Rejected => "rejected",
        }
    }
}

/// The `kind` label of `tollgate_chain_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChainErrorKind {
    /// The node was unreachable or timed out.
    Unavailable,
    /// The node answered with a JSON-RPC error.
    Rpc,
    /// The node refused a transaction (nonce, gas, fee).
    Rejected,
    /// A call or transaction reverted.
    Reverted,
    /// Anything else.
    Other,
}

impl ChainErrorKind {
    pub(super) const ALL: [Self; 5] = [
        Self::Unavailable,
        Self::Rpc,
        Self::Rejected,
        Self::Reverted,
        Self::Other,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unavailable => "unavailable",
            Self::Rpc => "rpc",
            Self::Rejected => "rejected",
            Self::Reverted => "reverted",
            Self::Other => "other",
        }
    }

    /// The kind of a chain-layer error.
    pub fn of(error: &tollgate_chain::Error) -> Self {
        use tollgate_chain::Error as E;
        match error {
            E::Unavailable(_) | E::Stopped => Self::Unavailable,
            E::Rpc { .. } => Self::Rpc,
            E::Rejected(_) => Self::Rejected,
            E::Revert(_) | E::Reverted { .. } => Self::Reverted,
            _ => Self::Other,
        }
    }
}
