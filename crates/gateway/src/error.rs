//! Why the gateway cannot start.

/// Why the gateway cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The config is not valid TOML for this schema (the message names the key).
    #[error("config: {0}")]
    Parse(#[from] toml::de::Error),
    /// A value is unusable.
    #[error("config: {0}")]
    Invalid(String),
    /// The directory of the SQLite memo store (`gate.memo_store`) could not be created.
    #[error("gate.memo_store: cannot create the directory {path}: {source}")]
    StateDir {
        /// The directory.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The SQLite memo store (`gate.memo_store`) could not be opened.
    #[error("gate.memo_store: cannot open {path}: {source}")]
    MemoStore {
        /// The database file.
        path: String,
        /// Cause.
        source: tollgate_gate::StoreError,
    },
    /// The gate could not be built (boxed: it is large, and rare).
    #[error("gate: {0}")]
    Gate(#[source] Box<tollgate_gate::BuildError>),
}

/// `Result` with the gateway's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
