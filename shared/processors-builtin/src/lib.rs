//! Processors that are useful without writing any code, and the
//! configuration file that turns on processors by kind.
//!
//! Where this crate sits in the processor plane, which reads left to right:
//! runner ([`ds_processor`]) → adapters (`ds-processor-host`) → hosts
//! (`ds-processor-local` in the server, `ds-processor-aws` in the Lambda
//! processor function) → built-in kinds and their TOML (`ds-processors-builtin`, **this crate**).
//! Test support for all of them: `ds-processor-testkit` (tests/processor-testkit).
//!
//! - [`ProcessorsConfig`]: the TOML file (`durable-streams serve
//!   --processors FILE`): a `[host]` table and one `[[processor]]` table per
//!   processor with its `kind`, `slug`, `streams` pattern, optional
//!   `checkpoint` cadence ([`parse_checkpoint`]) and options.
//! - [`Catalog`]: the kinds a host knows, by name. [`Catalog::builtin`] has
//!   the two below; [`Catalog::with_kind`] adds your own. [`Catalog::build`]
//!   checks a configuration (unknown kind, bad pattern, bad option, missing
//!   target stream: each an error naming the processor and the field) and
//!   returns the [`ds_processor_host::ProcessorRegistry`] a host runs.
//! - `outbox` ([`outbox`]): appends each consumed event, transformed by a
//!   JSON [`Template`], to a target stream exactly once.
//! - `counter` ([`counter`]): a materialized view counting events, in total
//!   and by the value at a JSON pointer.
//! - `state` ([`state`]): the live state of State Protocol streams, kept in
//!   the host's memory and served by the operator API ([`state::StateOperator`]).

mod catalog;
mod checkpoint;
mod config;
pub mod counter;
pub mod json_schema;
pub mod outbox;
pub mod state;
mod template;

pub use catalog::{Catalog, ProcessorKind};
pub use checkpoint::{parse_checkpoint, with_cadence};
pub use config::{ConfigError, HostSettings, Options, ProcessorDef, ProcessorsConfig, MAX_SLUG_LEN};
pub use template::{check_pointer, event_document, Template};
