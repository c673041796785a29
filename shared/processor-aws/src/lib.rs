//! The AWS processor host: the library behind `functions/lambda-processor`.
//!
//! Where this crate sits in the processor plane, which reads left to right:
//! runner ([`ds_processor`]) → adapters (`ds-processor-host`) → hosts
//! (`ds-processor-local` in the server, `ds-processor-aws` in the Lambda
//! processor function, **this crate**) → built-in kinds and their TOML (`ds-processors-builtin`).
//! Test support for all of them: `ds-processor-testkit` (tests/processor-testkit).
//!
//! The table's DynamoDB Stream is the doorbell. An event source mapping with
//! `FilterCriteria` (template.yaml) invokes the function only for chunk
//! inserts (a stream's tail moved) and TTL removals of meta items; a record
//! is only a wake: the runners read the journal themselves, and the records
//! of one stream in a batch coalesce into one catch-up. Everything else a
//! processor needs is here too:
//!
//! | module | what |
//! | --- | --- |
//! | [`record`] | the stream records, parsed one by one, and what each means |
//! | [`host`] | [`host::Processors`]: the registered processors of a stream, driven to its head within the invocation's deadline, warm between invocations |
//! | [`journal`] | the journal as a doorbell-driven host reads it (one read per batch) |
//! | [`lifecycle`] | each create, close and delete sent to EventBridge (optional), from the `__registry__` chunk inserts |
//! | [`lag`] | each processor's lag and the failures of revivals and tasks, as EMF metric lines |
//! | [`revival`] | revival alarms on EventBridge Scheduler (the AWS `AlarmScheduler`) |
//! | [`queue`] | the one SQS sender behind tasks, subscriptions' delayed times and parked records |
//! | [`tasks`] | background work handed to SQS, run by the same function, completion recorded |
//! | [`upkeep`] | TTL removals finished (fork reference released, items and objects purged), sealing, sweeping |
//! | [`function`] | [`function::ProcessorFunction`]: every event the function gets, dispatched |
//! | [`filter`] | Lambda's event filtering (the emulator pumps of `tests/lambda-pump` apply the template's) |
//! | [`env`] | the function from its environment |

pub mod env;
pub mod filter;
pub mod function;
pub mod host;
pub mod journal;
pub mod lag;
pub mod lifecycle;
pub mod queue;
pub mod record;
pub mod revival;
pub mod subscriptions;
pub mod tasks;
pub mod upkeep;

pub use env::function_from_env;
pub use function::{Deployment, FunctionError, Invocation, ProcessorFunction, Wiring};
pub use host::{HostConfig, HostStats, DEFAULT_CADENCE};
pub use revival::{RevivalInput, RevivalSchedules, RevivalTarget};
pub use tasks::{Task, TaskHandler, TaskHandlers, TaskQueue};
