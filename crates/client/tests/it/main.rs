//! The client against a real facilitator on loopback (the devnet in process, SQLite): every typed
//! call reads what the facilitator writes.
#![allow(unreachable_pub)]

mod calls;
mod support;
