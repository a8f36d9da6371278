//! `GET /healthz` and `GET /readyz`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The answer of `GET /healthz`: `{"status": "ok"}` while the process serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `"ok"`.
    pub status: String,
}

impl Health {
    /// `{"status": "ok"}`.
    pub fn ok() -> Self {
        Self {
            status: "ok".into(),
        }
    }
}

/// The answer of `GET /readyz` (200 when ready, 503 otherwise).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// Per dependency (`chain:<network>`, `store`): what it answered.
    pub checks: BTreeMap<String, String>,
    /// Whether every check passed.
    pub ready: bool,
}
