//! Processors that are useful without writing any code, and the
//! configuration file that turns on processors by kind.
//!
//! - [`ProcessorsConfig`]: the TOML file (`durable-streams serve
//!   --processors FILE`): a `[host]` table and one `[[processor]]` table per
//!   processor with its `kind`, `slug`, `streams` pattern and options.
//! - [`Catalog`]: the kinds a host knows, by name. [`Catalog::builtin`] has
//!   the two below; [`Catalog::with_kind`] adds your own. [`Catalog::build`]
//!   checks a configuration (unknown kind, bad pattern, bad option, missing
//!   target stream: each an error naming the processor and the field) and
//!   returns the [`ds_processor_host::ProcessorRegistry`] a host runs.
//! - `outbox` ([`outbox`]): appends each consumed event, transformed by a
//!   JSON [`Template`], to a target stream exactly once.
//! - `counter` ([`counter`]): a materialized view counting events, in total
//!   and by the value at a JSON pointer.

mod catalog;
mod config;
pub mod counter;
pub mod outbox;
mod template;

pub use catalog::{Catalog, ProcessorKind};
pub use config::{ConfigError, HostSettings, Options, ProcessorDef, ProcessorsConfig, MAX_SLUG_LEN};
pub use template::{check_pointer, event_document, Template};
