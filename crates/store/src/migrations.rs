//! The schema's migrations, embedded in the binary as `sqlx::migrate!` would embed them: the same
//! versions, descriptions and checksums (a test reads the directories as `sqlx` does and compares),
//! so a database migrated before opens unchanged. Built here rather than by the macro, which
//! compiled `sqlx`'s drivers a second time, SQLite's C source included, for the macro's own use.

use std::{borrow::Cow, sync::LazyLock};

use sqlx::{
    SqlStr,
    migrate::{Migration, MigrationType, Migrator},
};

/// Each migration, in both directories under `migrations/` (the two backends keep one sequence of
/// file names): for SQLite, then for PostgreSQL, its file name without `.sql` and its SQL.
macro_rules! embedded {
    ($($name:literal),+ $(,)?) => {
        (
            &[$(($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite/", $name, ".sql")))),+],
            &[$(($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres/", $name, ".sql")))),+],
        )
    };
}

/// A migration's file name without `.sql`, and its SQL.
type Files = &'static [(&'static str, &'static str)];

const FILES: (Files, Files) = embedded!(
    "0001_settlements_and_api_keys",
    "0002_providers",
    "0003_renewals",
    "0004_metering",
    "0005_webhooks",
    "0006_analytics",
    "0007_claims",
    "0008_revenue",
    "0009_payment_identifiers",
    "0010_leases",
    "0011_relayed_actions",
    "0012_renewal_attempts",
);

#[cfg(feature = "sqlite")]
pub(crate) static SQLITE_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(FILES.0));
#[cfg(feature = "postgres")]
pub(crate) static POSTGRES_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| migrator(FILES.1));

/// The migrator of these files, each resolved as `sqlx` resolves a file `NNNN_some_words.sql`:
/// version `NNNN`, description "some words", a simple (not reversible) migration, run in a
/// transaction unless its SQL starts with `-- no-transaction`.
fn migrator(files: Files) -> Migrator {
    Migrator::with_migrations(
        files
            .iter()
            .map(|&(name, sql)| migration(name, sql))
            .collect(),
    )
}

fn migration(name: &'static str, sql: &'static str) -> Migration {
    let (version, words) = name
        .split_once('_')
        .expect("a migration's file name is NNNN_description.sql");
    let version = version
        .parse()
        .expect("a migration's file name starts with its version");
    Migration::new(
        version,
        Cow::Owned(words.replace('_', " ")),
        MigrationType::Simple,
        SqlStr::from_static(sql),
        sql.starts_with("-- no-transaction"),
    )
}

#[cfg(all(test, feature = "sqlite", feature = "postgres"))]
mod tests {
    use std::path::Path;

    use super::*;

    /// Every file of each directory is embedded, and resolves to exactly what `sqlx::migrate!`
    /// (which reads the directory with this same function) embedded before.
    #[test]
    fn the_embedded_migrations_are_what_sqlx_reads_from_the_directories() {
        for (dir, migrator) in [
            ("sqlite", &*SQLITE_MIGRATOR),
            ("postgres", &*POSTGRES_MIGRATOR),
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(dir);
            let read = sqlx::migrate::resolve_blocking(&path).expect("the migrations directory");
            let embedded = migrator.iter().collect::<Vec<_>>();
            assert_eq!(
                embedded.len(),
                read.len(),
                "{dir}: a file is missing from the list"
            );
            for (ours, (theirs, file)) in embedded.into_iter().zip(&read) {
                let file = file.display();
                assert_eq!(ours.version, theirs.version, "{file}");
                assert_eq!(ours.description, theirs.description, "{file}");
                assert_eq!(ours.migration_type, theirs.migration_type, "{file}");
                assert_eq!(ours.checksum, theirs.checksum, "{file}");
                assert_eq!(ours.no_tx, theirs.no_tx, "{file}");
                assert_eq!(ours.sql.as_str(), theirs.sql.as_str(), "{file}");
            }
        }
    }
}
