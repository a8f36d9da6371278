//! The store's error type.

/// Store errors. Their text never reaches clients: the facilitator maps them to an internal
/// error and logs them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value could not be read back (corruption or a schema mismatch).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The URL names no supported database.
    #[error("unsupported store URL {0:?}: use sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
}

impl StoreError {
    /// Whether the row a call needed is not there (or is not the one the call named): what
    /// [`crate::Store::mark_confirmed`] answers for a key with no row for that payment.
    pub fn is_row_not_found(&self) -> bool {
        matches!(self, Self::Database(sqlx::Error::RowNotFound))
    }
}

/// Store result.
pub type StoreResult<T> = Result<T, StoreError>;
