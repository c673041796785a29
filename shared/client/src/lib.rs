//! A client of Durable Streams servers over HTTP: the operations of the
//! protocol on one stream ([`Client::create`], [`Client::append`],
//! [`Client::read`], [`Client::head`], [`Client::fork`],
//! [`Client::close`], [`Client::delete`]), live following over SSE that
//! resumes after disconnects without gaps or duplicates ([`Client::follow`]),
//! deterministic upload cutting for idempotent producers ([`upload`]), and
//! the fold of a server's `__registry__` stream ([`registry`]).
//!
//! It speaks the protocol only, so it works against any conforming server,
//! this project's or others'. The `durable-streams` binary's client
//! commands (`create`, `write`, `read`, …) are built on it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ds_client::Error> {
//! let client = ds_client::Client::builder("http://127.0.0.1:4437/v1/stream").build()?;
//! client.create("chat/1", &ds_client::CreateOptions { content_type: Some("application/json".into()), ..Default::default() }).await?;
//! client.append("chat/1", r#"{"text":"hi"}"#.into(), &ds_client::AppendOptions::default()).await?;
//! let mut live = client.follow("chat/1", "-1");
//! while let Some(batch) = live.next().await? {
//!     for data in &batch.data {
//!         for message in ds_client::json::messages(data).map_err(ds_client::Error::Invalid)? {
//!             println!("{}", message.get());
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```

mod error;
mod follow;
pub mod json;
mod ops;
pub mod registry;
pub mod retry;
pub mod sse;
mod transport;
pub mod upload;

pub use error::{Error, ProducerRefusal};
pub use follow::{Batch, Follow};
pub use ops::{AppendOptions, Appended, Chunk, CreateOptions, Created, ForkOptions, Producer, StreamInfo};
pub use retry::RetryPolicy;
pub use transport::{connector, Client, ClientBuilder, Connector};
