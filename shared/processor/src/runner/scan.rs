//! Read-ahead buffer of one scan.
//!
//! A scan walks the journal from the completed cursor to the head one entry
//! at a time. Deciding `caught_up` for a consumed event needs to know whether
//! any later deliverable event exists before the head, so the buffer reads
//! ahead page by page until it finds one or reads an empty page. The buffer
//! therefore holds the run of non-deliverable entries that follows a
//! consumed event (bounded by the head), never more.

use std::collections::VecDeque;

use serde::de::DeserializeOwned;

use crate::contract::Contract;
use crate::event::{decode, Decoded};
use crate::incarnation::StreamIncarnation;
use crate::ports::{Journal, JournalError};

#[derive(Debug)]
pub(crate) struct ScanEntry<E> {
    pub position: u64,
    pub decoded: Decoded<E>,
}

#[derive(Debug)]
pub(crate) struct ScanBuffer<E> {
    read_through: u64,
    entries: VecDeque<ScanEntry<E>>,
    /// The latest read returned nothing.
    head_reached: bool,
    page_size: usize,
}

impl<E: DeserializeOwned> ScanBuffer<E> {
    pub(crate) fn new(after: u64, page_size: usize) -> Self {
        Self { read_through: after, entries: VecDeque::new(), head_reached: false, page_size: page_size.max(1) }
    }

    /// Reads the next page; returns how many entries it added.
    pub(crate) async fn fill(
        &mut self,
        journal: &dyn Journal,
        incarnation: &StreamIncarnation,
        contract: &Contract,
    ) -> Result<usize, JournalError> {
        let page = match journal.read_after(incarnation, self.read_through, self.page_size).await {
            // Nothing this processor would have handled is lost: go on from
            // where the stream's history now starts (the `state` kind's
            // runner on a stream its compaction trimmed).
            Err(JournalError::NotRetained { earliest }) if contract.consumes.is_empty() => {
                self.read_through = self.read_through.max(earliest);
                journal.read_after(incarnation, self.read_through, self.page_size).await?
            }
            other => other?,
        };
        let mut added = 0;
        for entry in page {
            // Defensive: a journal must page strictly after the cursor; an
            // entry at or below it would be processed twice.
            if entry.position <= self.read_through {
                continue;
            }
            self.read_through = entry.position;
            self.entries.push_back(ScanEntry { position: entry.position, decoded: decode(contract, &entry) });
            added += 1;
        }
        self.head_reached = added == 0;
        Ok(added)
    }

    pub(crate) fn pop(&mut self) -> Option<ScanEntry<E>> {
        self.entries.pop_front()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn has_deliverable_from(&self, index: usize) -> bool {
        self.entries.iter().skip(index).any(|e| e.decoded.is_deliverable())
    }

    pub(crate) fn read_through(&self) -> u64 {
        self.read_through
    }

    pub(crate) fn head_reached(&self) -> bool {
        self.head_reached
    }
}
