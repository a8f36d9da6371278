//! Group commit, for both databases: one writer task takes every write waiting (up to a batch
//! size), runs them in one transaction on one connection and answers each caller only after
//! the commit, so concurrent writes share one commit (one WAL flush) instead of paying for one
//! each, and a row every write touches (an analytics rollup) is locked once per batch rather
//! than once per write.
//!
//! Every write is all-or-nothing on its own, whatever its batch does. A batch first runs its
//! writes one after the other with nothing between them: in the usual case none fails, and each
//! write costs only its own statements. When one fails (an error, or a refusal after some of its
//! statements ran), the batch is rolled back and run again with each write in a savepoint of
//! its own, whose failure then rolls back its statements alone while the batch goes on: writes
//! are operations that can run again (each run is a fresh clone of the operation given to
//! [`Writer::write`]), and a rolled-back run
//! left nothing behind. (On PostgreSQL any error aborts the whole transaction, so a savepoint
//! per write is the only way one write's failure can leave the others standing; paying for it
//! on every write cost a round trip per write.) PostgreSQL keeps the ids of at most 64
//! subtransactions per transaction in shared memory (more make every other session's snapshots
//! slower), hence its batches of at most 64.
//!
//! Writes of one kind can also merge ([`Merge`], through [`Writer::write_merged`]): a batch runs
//! the writes of each such kind together, in as few statements as the database allows (the
//! inserts of a batch's payments are one multi-row statement), rather than one round trip each.
//! A merged run that fails is a failed write like any other: the batch runs again, each write
//! alone in its savepoint.

use std::{
    any::{Any, TypeId},
    marker::PhantomData,
};

use tokio::sync::{mpsc, oneshot};

use crate::{StoreError, StoreResult, backend::BoxFuture, conn::Conn};

/// A write that a batch runs together with the other writes of its kind waiting with it, in as
/// few statements as the database allows (one multi-row statement for many callers): given to
/// [`Writer::write_merged`]. The order of the writes within a batch is free (their callers are
/// concurrent), so a batch runs each kind's writes side by side.
pub(crate) trait Merge<C>: Clone + Send + 'static {
    /// What each write answers its caller.
    type Output: Send + 'static;

    /// Whether one write of this kind alone runs as a single statement, atomic on its own: a
    /// batch of that one write then runs without a transaction around it where the database
    /// commits such a statement as durably as a `COMMIT` ([`Spelling::lone_statement`]).
    const ONE_STATEMENT: bool = false;

    /// Runs `items`, each the write of its own caller, inside the batch's transaction: one
    /// result per item, in order. An item's own `Err` must have changed nothing. `Err` for the
    /// whole (a statement failed) rolls the batch back and runs it again with every write alone
    /// in a savepoint of its own (`run_all` of one item), as for any failed write.
    fn run_all<'c>(
        items: Vec<Self>,
        conn: &'c mut C,
    ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<Self::Output>>>>;
}

/// A write waiting for the next group commit: its operation, which can run more than once (the
/// last run is the one that counts), and its caller.
trait Pending<C>: Send {
    /// Runs the operation inside the batch's transaction; whether it failed.
    fn run<'c>(&'c mut self, conn: &'c mut C) -> BoxFuture<'c, bool>;

    /// Answers the caller with the last run's result, or with the batch's failure.
    fn deliver(self: Box<Self>, committed: &Result<(), String>);

    /// The kind of a write that runs merged with the others of its kind ([`Merge`]).
    fn kind(&self) -> Option<TypeId> {
        None
    }

    /// Whether this write alone is one statement ([`Merge::ONE_STATEMENT`]).
    fn one_statement(&self) -> bool {
        false
    }

    /// Runs this write and `others` (at least one, all of its [`Pending::kind`]) together;
    /// whether the run failed as a whole (then the batch runs again, each write alone, and no
    /// result of this run counts).
    fn run_merged<'c>(
        &'c mut self,
        others: Vec<&'c mut dyn Any>,
        conn: &'c mut C,
    ) -> BoxFuture<'c, bool> {
        debug_assert!(others.is_empty(), "only writes of a kind merge");
        self.run(conn)
    }

    /// This write, for the first of its kind to take it to [`Pending::run_merged`].
    fn as_any(&mut self) -> &mut dyn Any;
}

/// The answer to a write: its last run's result once the batch committed.
fn outcome<T>(committed: &Result<(), String>, result: Option<StoreResult<T>>) -> StoreResult<T> {
    match (committed, result) {
        (Ok(()), Some(result)) => result,
        (Err(e), _) => Err(StoreError::Database(sqlx::Error::Protocol(format!(
            "group commit failed: {e}"
        )))),
        (Ok(()), None) => Err(StoreError::Database(sqlx::Error::Protocol(
            "group commit: the write never ran".into(),
        ))),
    }
}

/// [`Pending`] for an operation `F` with result `T`.
struct Job<F, T> {
    op: F,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<C, F, T> Pending<C> for Job<F, T>
where
    C: Send,
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut C) -> BoxFuture<'c, StoreResult<T>> + Clone + Send + 'static,
{
    fn run<'c>(&'c mut self, conn: &'c mut C) -> BoxFuture<'c, bool> {
        let op = self.op.clone();
        Box::pin(async move {
            let result = op(conn).await;
            let failed = result.is_err();
            self.result = Some(result);
            failed
        })
    }

    fn deliver(self: Box<Self>, committed: &Result<(), String>) {
        let _ = self.reply.send(outcome(committed, self.result));
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// [`Pending`] for a write `M` that merges with its kind.
struct MergeJob<M: Merge<C>, C> {
    item: M,
    result: Option<StoreResult<M::Output>>,
    reply: oneshot::Sender<StoreResult<M::Output>>,
    conn: PhantomData<fn(&mut C)>,
}

impl<C: Send + 'static, M: Merge<C>> MergeJob<M, C> {
    /// Runs `group` (writes of this kind) together; whether the run failed as a whole (then
    /// the batch runs again, each write alone, and no result here counts).
    async fn run_group(group: Vec<&mut Self>, conn: &mut C) -> bool {
        let items = group.iter().map(|j| j.item.clone()).collect();
        match M::run_all(items, conn).await {
            Ok(results) if results.len() == group.len() => {
                // An item's own failure changed nothing: it is only answered.
                for (job, result) in group.into_iter().zip(results) {
                    job.result = Some(result);
                }
                false
            }
            Ok(_) | Err(_) => true,
        }
    }
}

impl<C: Send + 'static, M: Merge<C>> Pending<C> for MergeJob<M, C> {
    fn run<'c>(&'c mut self, conn: &'c mut C) -> BoxFuture<'c, bool> {
        Box::pin(async move {
            let items = vec![self.item.clone()];
            let result = match M::run_all(items, conn).await {
                Ok(mut results) if results.len() == 1 => results.remove(0),
                Ok(_) => Err(StoreError::Database(sqlx::Error::Protocol(
                    "a merged write answered no result".into(),
                ))),
                Err(e) => Err(e),
            };
            let failed = result.is_err();
            self.result = Some(result);
            failed
        })
    }

    fn deliver(self: Box<Self>, committed: &Result<(), String>) {
        let _ = self.reply.send(outcome(committed, self.result));
    }

    fn kind(&self) -> Option<TypeId> {
        Some(TypeId::of::<M>())
    }

    fn one_statement(&self) -> bool {
        M::ONE_STATEMENT
    }

    fn run_merged<'c>(
        &'c mut self,
        others: Vec<&'c mut dyn Any>,
        conn: &'c mut C,
    ) -> BoxFuture<'c, bool> {
        let mut group = Vec::with_capacity(1 + others.len());
        group.push(self);
        for other in others {
            match other.downcast_mut::<Self>() {
                Some(job) => group.push(job),
                // Never: `run_batch` groups writes by their kind.
                None => return Box::pin(async { true }),
            }
        }
        Box::pin(Self::run_group(group, conn))
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// How a database's writer opens and closes its batches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spelling {
    /// Opens the batch's transaction.
    pub(crate) begin: &'static str,
    /// Opens it and a first savepoint, in one round trip.
    pub(crate) begin_savepoint: &'static str,
    /// Commits the batch; on PostgreSQL it fails, rather than silently rolling back, when an
    /// error the writes did not report left the transaction aborted (callers are told that
    /// their writes committed only when they did).
    pub(crate) commit: &'static str,
    /// Most writes per batch.
    pub(crate) max_batch: usize,
    /// Whether a batch of one write that is one statement ([`Merge::ONE_STATEMENT`]) runs
    /// without `begin` and `commit`: the database commits a statement run outside a
    /// transaction as its own, durable before the statement answers.
    pub(crate) lone_statement: bool,
}

/// SQLite: `BEGIN IMMEDIATE` takes the write lock at once (no upgrade that could fail busy).
/// A lone statement commits on its own (with the same WAL sync): each statement of a batch is a
/// round trip to the connection's worker thread, so a lone claim, the gate's write one request
/// at a time, costs one instead of three.
pub(crate) const SQLITE: Spelling = Spelling {
    begin: "BEGIN IMMEDIATE",
    begin_savepoint: "BEGIN IMMEDIATE; SAVEPOINT job",
    commit: "COMMIT",
    max_batch: 256,
    lone_statement: true,
};

/// PostgreSQL. A batch first takes a transaction-scoped advisory lock (one per schema), so the
/// batches of several replicas sharing the database run one at a time: a batch holds the row
/// locks of all its writes until its commit, and two batches taking hot rows (analytics rollups
/// of several payees) in opposite orders would otherwise deadlock. Rows stay contended only
/// within a batch, where one connection takes them in turn.
pub(crate) const POSTGRES: Spelling = Spelling {
    begin: "BEGIN; SELECT pg_advisory_xact_lock(1953459305, hashtext(current_schema()))",
    begin_savepoint: "BEGIN; SELECT pg_advisory_xact_lock(1953459305, hashtext(current_schema())); \
                      SAVEPOINT job",
    commit: "SELECT 1; COMMIT",
    max_batch: 64,
    // Every batch takes the advisory lock: a statement alone would run without it.
    lone_statement: false,
};

/// Queues writes for a writer task ([`spawn`]).
pub(crate) struct Writer<C> {
    jobs: mpsc::Sender<Box<dyn Pending<C>>>,
}

impl<C> Clone for Writer<C> {
    fn clone(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
        }
    }
}

impl<C> std::fmt::Debug for Writer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl<C: Conn + 'static> Writer<C> {
    /// Runs `op` in the next group commit, all or nothing, and returns its result once that
    /// commit is durable. `op` may run more than once, each time from a clone (a batch with a
    /// failed write is run again); only its last run, in the transaction that commits, counts.
    pub(crate) async fn write<T, F>(&self, op: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut C) -> BoxFuture<'c, StoreResult<T>> + Clone + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<StoreResult<T>>();
        let job = Job {
            op,
            result: None,
            reply,
        };
        let closed = || StoreError::Database(sqlx::Error::PoolClosed);
        self.jobs.send(Box::new(job)).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }

    /// Runs `item` in the next group commit, merged with the writes of its kind waiting with it
    /// ([`Merge`]), and returns its result once that commit is durable.
    pub(crate) async fn write_merged<M: Merge<C>>(&self, item: M) -> StoreResult<M::Output> {
        let (reply, answer) = oneshot::channel();
        let job = MergeJob {
            item,
            result: None,
            reply,
            conn: PhantomData,
        };
        let closed = || StoreError::Database(sqlx::Error::PoolClosed);
        self.jobs.send(Box::new(job)).await.map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

/// Starts the writer task on `pool`; it ends when the last [`Writer`] is dropped.
pub(crate) fn spawn<DB>(pool: sqlx::Pool<DB>, spelling: Spelling) -> Writer<DB::Connection>
where
    DB: sqlx::Database,
    DB::Connection: Conn + 'static,
{
    let (tx, mut rx) = mpsc::channel(4 * spelling.max_batch);
    tokio::spawn(async move {
        let mut jobs = Vec::with_capacity(spelling.max_batch);
        while rx.recv_many(&mut jobs, spelling.max_batch).await > 0 {
            let batch = std::mem::take(&mut jobs);
            if let Err(e) = commit_batch(&pool, spelling, batch).await {
                tracing::error!(error = %e, "group commit failed");
            }
        }
    });
    Writer { jobs: tx }
}

/// Runs `jobs` in one transaction and delivers every result after the commit.
async fn commit_batch<DB>(
    pool: &sqlx::Pool<DB>,
    spelling: Spelling,
    mut jobs: Vec<Box<dyn Pending<DB::Connection>>>,
) -> Result<(), String>
where
    DB: sqlx::Database,
    DB::Connection: Conn + 'static,
{
    let outcome = match pool.acquire().await {
        Ok(mut conn) => {
            let outcome = run_batch(&mut *conn, spelling, &mut jobs).await;
            if outcome.is_err() {
                // Whatever state the connection is in (mid-transaction, broken), it does not go
                // back to the pool.
                let _ = conn.raw("ROLLBACK").await;
                conn.close_on_drop();
            }
            outcome
        }
        Err(e) => Err(e.to_string()),
    };
    for job in jobs {
        job.deliver(&outcome);
    }
    outcome
}

async fn run_batch<C: Conn + 'static>(
    conn: &mut C,
    spelling: Spelling,
    jobs: &mut [Box<dyn Pending<C>>],
) -> Result<(), String> {
    let text = |e: StoreError| e.to_string();
    if let [job] = jobs
        && spelling.lone_statement
        && job.one_statement()
    {
        // One statement, committed on its own; failed, it changed nothing.
        job.run(conn).await;
        return Ok(());
    }
    // Every write, nothing between them: the usual case, where none fails. Writes of one kind
    // side by side, each kind's run together.
    jobs.sort_by_key(|job| job.kind());
    conn.raw(spelling.begin).await.map_err(text)?;
    let mut failed = false;
    let mut rest = &mut jobs[..];
    while let Some(first) = rest.first() {
        let kind = first.kind();
        let len = match kind {
            Some(_) => rest.iter().take_while(|job| job.kind() == kind).count(),
            None => 1,
        };
        let (group, after) = rest.split_at_mut(len);
        rest = after;
        let Some((first, others)) = group.split_first_mut() else {
            break;
        };
        let failed_now = if others.is_empty() {
            first.run(conn).await
        } else {
            let others: Vec<&mut dyn Any> = others.iter_mut().map(|job| job.as_any()).collect();
            first.run_merged(others, conn).await
        };
        if failed_now {
            failed = true;
            break;
        }
    }
    if !failed {
        return conn.raw(spelling.commit).await.map_err(text);
    }
    conn.raw("ROLLBACK").await.map_err(text)?;
    if jobs.len() == 1 {
        // Alone, a failed write is undone with the whole transaction.
        return Ok(());
    }
    // Again, each write in a savepoint of its own: a failure undoes its own statements only.
    for (i, job) in jobs.iter_mut().enumerate() {
        let open = if i == 0 {
            spelling.begin_savepoint
        } else {
            "RELEASE SAVEPOINT job; SAVEPOINT job"
        };
        conn.raw(open).await.map_err(text)?;
        if job.run(conn).await {
            conn.raw("ROLLBACK TO SAVEPOINT job").await.map_err(text)?;
        }
    }
    conn.raw(spelling.commit).await.map_err(text)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{PostgresStore, SqliteStore, backend::Backend, conn::args};

    /// Writes of one batch: each that fails (a single statement, or the second statement of a
    /// write of several) changes nothing and gets its error; the others commit.
    async fn failures_stay_with_their_write<B: Backend>(store: Arc<B>) {
        store
            .write(|c| {
                Box::pin(c.raw(
                    "DROP TABLE IF EXISTS group_commit_t; \
                     CREATE TABLE group_commit_t (k TEXT PRIMARY KEY); \
                     INSERT INTO group_commit_t (k) VALUES ('taken')",
                ))
            })
            .await
            .unwrap();
        let insert = "INSERT INTO group_commit_t (k) VALUES ($1)";
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let key = format!("k{i}");
                    let outcome = match i % 3 {
                        // One statement.
                        0 => {
                            store
                                .write(move |c| {
                                    Box::pin(async move {
                                        c.execute(insert, args![&key]).await.map(drop)
                                    })
                                })
                                .await
                        }
                        // Two, the second refused: neither stays.
                        1 => {
                            store
                                .write(move |c| {
                                    Box::pin(async move {
                                        c.execute(insert, args![&key]).await?;
                                        c.execute(insert, args![&key]).await.map(drop)
                                    })
                                })
                                .await
                        }
                        // One statement, refused (the key is taken).
                        _ => {
                            store
                                .write(move |c| {
                                    Box::pin(async move {
                                        c.execute(insert, args!["taken"]).await.map(drop)
                                    })
                                })
                                .await
                        }
                    };
                    (i, outcome.is_ok())
                })
            })
            .collect();
        let mut ok: Vec<usize> = Vec::new();
        for t in tasks {
            let (i, done) = t.await.unwrap();
            if done {
                ok.push(i);
            }
        }
        let rows: Vec<(String,)> = store
            .reader()
            .await
            .unwrap()
            .fetch_all("SELECT k FROM group_commit_t ORDER BY k", args![])
            .await
            .unwrap();
        let mut keys: Vec<String> = rows.into_iter().map(|(k,)| k).collect();
        keys.sort();
        let mut expected: Vec<String> = (0..60).step_by(3).map(|i| format!("k{i}")).collect();
        expected.push("taken".into());
        expected.sort();
        assert_eq!(keys, expected);
        let expected_ok: Vec<usize> = (0..60).step_by(3).collect();
        assert_eq!(ok, expected_ok);

        // Alone in its batch, a write of several statements that fails leaves nothing either.
        let alone = store
            .write(move |c| {
                Box::pin(async move {
                    c.execute(insert, args!["alone"]).await?;
                    c.execute(insert, args!["alone"]).await.map(drop)
                })
            })
            .await;
        assert!(alone.is_err());
        let rows: Vec<(String,)> = store
            .reader()
            .await
            .unwrap()
            .fetch_all("SELECT k FROM group_commit_t WHERE k = 'alone'", args![])
            .await
            .unwrap();
        assert!(rows.is_empty(), "a failed write committed in part");

        // Merged writes, with plain ones in the same batches: a merged run that fails (a taken
        // key) runs again write by write, and only the writes that fail alone are refused.
        let merged = |i: usize| i % 7 != 1;
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let outcome = if merged(i) {
                        let key = if i % 5 == 0 {
                            "taken".to_owned()
                        } else {
                            format!("m{i}")
                        };
                        store.write_merged(InsertKey(key)).await
                    } else {
                        let key = format!("p{i}");
                        store
                            .write(move |c| {
                                Box::pin(
                                    async move { c.execute(insert, args![&key]).await.map(drop) },
                                )
                            })
                            .await
                    };
                    (i, outcome.is_ok())
                })
            })
            .collect();
        let mut written = 0;
        for t in tasks {
            let (i, done) = t.await.unwrap();
            assert_eq!(done, !merged(i) || i % 5 != 0, "write {i}");
            written += i64::from(done);
        }
        let rows: Vec<(i64,)> = store
            .reader()
            .await
            .unwrap()
            .fetch_all(
                "SELECT COUNT(*) FROM group_commit_t WHERE k LIKE 'm%' OR k LIKE 'p%'",
                args![],
            )
            .await
            .unwrap();
        assert_eq!(rows, [(written,)]);
        store
            .write(|c| Box::pin(c.raw("DROP TABLE group_commit_t")))
            .await
            .unwrap();
    }

    /// A merged write for the tests: inserts its keys one statement at a time; a taken key
    /// fails the whole run.
    #[derive(Clone)]
    struct InsertKey(String);

    impl<C: Conn + 'static> Merge<C> for InsertKey {
        type Output = ();

        fn run_all<'c>(
            items: Vec<Self>,
            c: &'c mut C,
        ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<()>>>> {
            Box::pin(async move {
                let mut out = Vec::with_capacity(items.len());
                for InsertKey(k) in &items {
                    c.execute("INSERT INTO group_commit_t (k) VALUES ($1)", args![k])
                        .await?;
                    out.push(Ok(()));
                }
                Ok(out)
            })
        }
    }

    /// [`InsertKey`], one statement for one key ([`Merge::ONE_STATEMENT`]).
    #[derive(Clone)]
    struct InsertOne(String);

    impl<C: Conn + 'static> Merge<C> for InsertOne {
        type Output = ();

        const ONE_STATEMENT: bool = true;

        fn run_all<'c>(
            items: Vec<Self>,
            c: &'c mut C,
        ) -> BoxFuture<'c, StoreResult<Vec<StoreResult<()>>>> {
            InsertKey::run_all(items.into_iter().map(|i| InsertKey(i.0)).collect(), c)
        }
    }

    /// On SQLite a lone one-statement write runs outside a transaction: committed (durable
    /// across a reopen), refused without a trace, and the batches after it open their own.
    #[tokio::test]
    async fn sqlite_lone_statements_commit_on_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("lone.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        let create = "CREATE TABLE group_commit_t (k TEXT PRIMARY KEY)";
        store.write(|c| Box::pin(c.raw(create))).await.unwrap();
        store.write_merged(InsertOne("a".into())).await.unwrap();
        let taken = store.write_merged(InsertOne("a".into())).await;
        assert!(taken.is_err(), "a taken key is refused");
        let insert = "INSERT INTO group_commit_t (k) VALUES ($1)";
        store
            .write(move |c| {
                Box::pin(async move {
                    c.execute(insert, args!["b"]).await?;
                    c.execute(insert, args!["c"]).await.map(drop)
                })
            })
            .await
            .unwrap();
        store.write_merged(InsertOne("d".into())).await.unwrap();
        store.close().await;

        let store = SqliteStore::connect(&url).await.unwrap();
        let rows: Vec<(String,)> = store
            .reader()
            .await
            .unwrap()
            .fetch_all("SELECT k FROM group_commit_t ORDER BY k", args![])
            .await
            .unwrap();
        let keys: Vec<&str> = rows.iter().map(|(k,)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c", "d"]);
    }

    #[tokio::test]
    async fn sqlite_failures_stay_with_their_write() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("group.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        failures_stay_with_their_write(Arc::new(store)).await;
    }

    /// `TOLLGATE_TEST_DATABASE_URL`, or the test fails (as `tollgate_testkit::peer::database_url`
    /// does; this crate's unit tests do not depend on the testkit).
    fn database_url() -> String {
        std::env::var("TOLLGATE_TEST_DATABASE_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "this test needs PostgreSQL, and TOLLGATE_TEST_DATABASE_URL is not set: set \
                     TOLLGATE_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
                     (scripts/test sets it)"
                )
            })
    }

    /// On PostgreSQL, a write that hides a failed statement (it returns `Ok`) leaves the batch's
    /// transaction aborted: every write of the batch is then told it failed, none that it
    /// committed.
    #[tokio::test]
    async fn postgres_never_reports_a_commit_that_rolled_back() {
        let url = database_url();
        let store = Arc::new(
            PostgresStore::connect_with_schema(&url, "store_group_abort")
                .await
                .unwrap(),
        );
        store
            .write(|c| {
                Box::pin(c.raw(
                    "DROP TABLE IF EXISTS group_abort_t; \
                     CREATE TABLE group_abort_t (k TEXT PRIMARY KEY)",
                ))
            })
            .await
            .unwrap();
        let insert = "INSERT INTO group_abort_t (k) VALUES ($1)";
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let key = format!("k{i}");
                    store
                        .write(move |c| {
                            Box::pin(async move {
                                if i == 9 {
                                    // The last write of the batch hides its error.
                                    let _ = c.execute("SELECT 1/0", args![]).await;
                                    return Ok(());
                                }
                                c.execute(insert, args![&key]).await.map(drop)
                            })
                        })
                        .await
                        .is_ok()
                })
            })
            .collect();
        let mut told_ok = 0;
        for t in tasks {
            told_ok += usize::from(t.await.unwrap());
        }
        let rows: Vec<(String,)> = store
            .reader()
            .await
            .unwrap()
            .fetch_all("SELECT k FROM group_abort_t", args![])
            .await
            .unwrap();
        assert_eq!(told_ok, 0, "writers told their writes committed");
        assert!(rows.is_empty(), "{rows:?}");
        store
            .write(|c| Box::pin(c.raw("DROP TABLE group_abort_t")))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn postgres_failures_stay_with_their_write() {
        let url = database_url();
        let store = PostgresStore::connect_with_schema(&url, "store_group_commit")
            .await
            .unwrap();
        failures_stay_with_their_write(Arc::new(store)).await;
    }
}
