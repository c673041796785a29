//! A shared, ordered record of what happened across adapters, so tests can
//! check orderings such as "every blocker of N settled before the commit
//! that acknowledged N".

use std::sync::{Arc, Mutex};

use crate::lock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// A progress commit landed.
    Committed { acknowledged_through: u64, reduced_through: u64, cursor_revision: u64 },
    /// An effect was applied for the first time under `key`.
    EffectApplied { key: String, label: String },
    /// Anything a test processor wants to record.
    Note(String),
}

#[derive(Debug, Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<Mark>>>);

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, mark: Mark) {
        lock(&self.0).push(mark);
    }

    pub fn note(&self, note: impl Into<String>) {
        self.push(Mark::Note(note.into()));
    }

    pub fn marks(&self) -> Vec<Mark> {
        lock(&self.0).clone()
    }

    pub fn notes(&self) -> Vec<String> {
        lock(&self.0)
            .iter()
            .filter_map(|m| match m {
                Mark::Note(n) => Some(n.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn clear(&self) {
        lock(&self.0).clear();
    }
}
