//! The devnet's durable journal: an append-only file of length-prefixed, checksummed records,
//! written by one flusher thread that batches records and fsyncs once per batch (group commit).
//!
//! File layout: the 8-byte magic `TGJRNL01`, then records `[len: u32 LE][check: 4 bytes][payload]`
//! where `check` is the first four bytes of `keccak256(payload)`. The first record is the devnet's
//! identity (JSON); the rest are [`Record`]s. A record cut short by a crash (the tail of the file)
//! is detected and dropped on open; damage before the tail is an error.

use std::{
    fs::{File, OpenOptions},
    io::{self, BufWriter, Read, Seek, SeekFrom, Write},
    path::Path,
    sync::mpsc,
    thread,
};

use alloy::primitives::{Address, Bytes, keccak256};
use tokio::sync::watch;

const MAGIC: &[u8; 8] = b"TGJRNL01";
/// Largest record accepted on read; anything bigger is damage.
const MAX_RECORD: u32 = 1 << 24;

/// One journal entry after the identity record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// A transaction included in its own block at `timestamp`, sent by `sender`, EIP-2718 bytes.
    Tx {
        timestamp: u64,
        sender: Address,
        raw: Bytes,
    },
    /// The clock moved forward by `seconds` (time travel).
    TimeAdvance { seconds: u64 },
    /// An empty block mined at `timestamp`.
    Mine { timestamp: u64 },
}

impl Record {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Self::Tx {
                timestamp,
                sender,
                raw,
            } => {
                out.push(1);
                out.extend_from_slice(&timestamp.to_le_bytes());
                out.extend_from_slice(sender.as_slice());
                out.extend_from_slice(raw);
            }
            Self::TimeAdvance { seconds } => {
                out.push(2);
                out.extend_from_slice(&seconds.to_le_bytes());
            }
            Self::Mine { timestamp } => {
                out.push(3);
                out.extend_from_slice(&timestamp.to_le_bytes());
            }
        }
        out
    }

    fn decode(payload: &[u8]) -> io::Result<Self> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed journal record");
        let (&kind, rest) = payload.split_first().ok_or_else(bad)?;
        let u64_at = |b: &[u8]| -> io::Result<u64> {
            Ok(u64::from_le_bytes(
                b.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?,
            ))
        };
        match kind {
            1 if rest.len() > 28 => Ok(Self::Tx {
                timestamp: u64_at(rest)?,
                sender: Address::from_slice(&rest[8..28]),
                raw: Bytes::copy_from_slice(&rest[28..]),
            }),
            2 if rest.len() == 8 => Ok(Self::TimeAdvance {
                seconds: u64_at(rest)?,
            }),
            3 if rest.len() == 8 => Ok(Self::Mine {
                timestamp: u64_at(rest)?,
            }),
            _ => Err(bad()),
        }
    }
}

fn frame(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&keccak256(payload)[..4]);
    out.extend_from_slice(payload);
}

/// What [`open`] found in an existing journal.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The identity record, or `None` for a new journal.
    pub(crate) identity: Option<Vec<u8>>,
    /// The records after it, in order.
    pub(crate) records: Vec<Record>,
    /// Bytes dropped from a torn tail.
    pub(crate) dropped_tail: u64,
    pub(crate) file: File,
}

/// Opens (creating if needed) the journal at `path` and reads it back, truncating a torn tail.
pub(crate) fn open(path: &Path) -> io::Result<Opened> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    if data.is_empty() {
        file.write_all(MAGIC)?;
        file.sync_all()?;
        if let Some(dir) = path.parent() {
            // Make the file's creation itself durable.
            File::open(dir)?.sync_all()?;
        }
        return Ok(Opened {
            identity: None,
            records: Vec::new(),
            dropped_tail: 0,
            file,
        });
    }
    if data.len() < MAGIC.len() || &data[..MAGIC.len()] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a Tollgate devnet journal", path.display()),
        ));
    }
    let mut pos = MAGIC.len();
    let mut payloads = Vec::new();
    let mut dropped_tail = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let torn = |why: &str| -> io::Result<()> {
            tracing::warn!(
                offset = pos,
                bytes = rest.len(),
                "devnet journal: dropping torn last record ({why})"
            );
            Ok(())
        };
        if rest.len() < 8 {
            torn("short header")?;
            dropped_tail = rest.len() as u64;
            break;
        }
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes"));
        if len > MAX_RECORD {
            return Err(corrupt(pos, "record length out of range"));
        }
        let end = 8 + len as usize;
        if rest.len() < end {
            torn("short payload")?;
            dropped_tail = rest.len() as u64;
            break;
        }
        let payload = &rest[8..end];
        if keccak256(payload)[..4] != rest[4..8] {
            if rest.len() == end {
                torn("checksum")?;
                dropped_tail = rest.len() as u64;
                break;
            }
            return Err(corrupt(pos, "checksum mismatch"));
        }
        payloads.push(payload.to_vec());
        pos += end;
    }
    if dropped_tail > 0 {
        file.set_len(pos as u64)?;
        file.sync_all()?;
    }
    file.seek(SeekFrom::End(0))?;
    let mut payloads = payloads.into_iter();
    let identity = payloads.next();
    let records = payloads
        .map(|p| Record::decode(&p))
        .collect::<io::Result<Vec<_>>>()?;
    Ok(Opened {
        identity,
        records,
        dropped_tail,
        file,
    })
}

fn corrupt(offset: usize, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("devnet journal damaged at byte {offset}: {why}"),
    )
}

/// Writes the identity record synchronously (a new journal only).
pub(crate) fn write_identity(file: &mut File, identity: &[u8]) -> io::Result<()> {
    let mut buf = Vec::new();
    frame(identity, &mut buf);
    file.write_all(&buf)?;
    file.sync_data()
}

/// The appending side: records go to the flusher thread, which reports the highest durable
/// sequence number through a watch channel.
#[derive(Debug)]
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<(u64, Vec<u8>)>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    /// Starts the flusher thread on `file`; `durable` receives each fsynced sequence number.
    pub(crate) fn start(file: File, durable: watch::Sender<u64>) -> Self {
        let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
        let thread = thread::Builder::new()
            .name("devnet-journal".into())
            .spawn(move || flusher(file, &rx, &durable))
            .expect("spawn the journal thread");
        Self {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Queues record `seq` for the next group commit.
    pub(crate) fn append(&self, seq: u64, record: &Record) {
        let mut buf = Vec::new();
        frame(&record.encode(), &mut buf);
        if let Some(tx) = &self.tx {
            // A closed channel means the flusher died on an I/O error it already logged; the
            // durable watermark then stops advancing and waiters see it.
            let _ = tx.send((seq, buf));
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn flusher(file: File, rx: &mpsc::Receiver<(u64, Vec<u8>)>, durable: &watch::Sender<u64>) {
    let mut out = BufWriter::with_capacity(1 << 16, file);
    while let Ok((mut seq, buf)) = rx.recv() {
        let mut result = out.write_all(&buf);
        while let Ok((s, b)) = rx.try_recv() {
            seq = s;
            if result.is_ok() {
                result = out.write_all(&b);
            }
        }
        let result = result
            .and_then(|()| out.flush())
            .and_then(|()| out.get_ref().sync_data());
        if let Err(e) = result {
            tracing::error!(error = %e, "devnet journal write failed; no further transaction becomes durable");
            return;
        }
        durable.send_replace(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut opened = open(&path).unwrap();
        assert!(opened.identity.is_none());
        write_identity(&mut opened.file, b"{\"id\":1}").unwrap();
        let (durable, mut seen) = watch::channel(0);
        let writer = Writer::start(opened.file, durable);
        let recs = [
            Record::Tx {
                timestamp: 7,
                sender: Address::repeat_byte(1),
                raw: Bytes::from_static(&[2, 0xc0]),
            },
            Record::TimeAdvance { seconds: 86_400 },
            Record::Mine { timestamp: 9 },
        ];
        for (i, r) in recs.iter().enumerate() {
            writer.append(i as u64 + 1, r);
        }
        drop(writer);
        assert_eq!(*seen.borrow_and_update(), 3);

        // A torn tail: half a record appended.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        let mut buf = Vec::new();
        frame(&Record::Mine { timestamp: 10 }.encode(), &mut buf);
        f.write_all(&buf[..buf.len() - 3]).unwrap();
        drop(f);
        let len_before = std::fs::metadata(&path).unwrap().len();

        let opened = open(&path).unwrap();
        assert_eq!(opened.identity.as_deref(), Some(&b"{\"id\":1}"[..]));
        assert_eq!(opened.records, recs);
        assert_eq!(opened.dropped_tail, buf.len() as u64 - 3);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len_before - opened.dropped_tail
        );
    }

    #[test]
    fn damage_before_the_tail_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let mut opened = open(&path).unwrap();
        write_identity(&mut opened.file, b"{}").unwrap();
        let (durable, _) = watch::channel(0);
        let writer = Writer::start(opened.file, durable);
        writer.append(1, &Record::Mine { timestamp: 1 });
        writer.append(2, &Record::Mine { timestamp: 2 });
        drop(writer);
        let mut data = std::fs::read(&path).unwrap();
        let first_record = MAGIC.len() + 8 + 2; // magic, identity header, "{}"
        data[first_record + 9] ^= 0xff; // flip a payload byte of the first Mine record
        std::fs::write(&path, data).unwrap();
        let err = open(&path).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
    }

    #[test]
    fn not_a_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        std::fs::write(&path, b"hello world").unwrap();
        assert!(
            open(&path)
                .unwrap_err()
                .to_string()
                .contains("not a Tollgate devnet journal")
        );
    }
}
