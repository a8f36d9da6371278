//! (being written: issue 34)
