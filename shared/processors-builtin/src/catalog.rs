//! The processor kinds a host knows, and the registry a configuration
//! builds from them.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ds_core::StreamService;
use ds_processor_host::{ProcessorRegistry, ProcessorSpec, RegistryError};
use ds_protocol::glob::Glob;

use crate::config::{ConfigError, ProcessorDef, ProcessorsConfig};

/// A kind of processor a configuration may name (`kind = "…"`).
#[async_trait]
pub trait ProcessorKind: Send + Sync {
    /// Checks the processor's options (take each with
    /// [`crate::Options`]'s getters, then [`crate::Options::finish`]) and
    /// builds its spec. The spec's slug must be `def.slug`.
    async fn build(&self, def: ProcessorDef, service: &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError>;
}

/// A kind from a function (for kinds that need no I/O to build).
struct FnKind<F>(F);

#[async_trait]
impl<F> ProcessorKind for FnKind<F>
where
    F: Fn(ProcessorDef, &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> + Send + Sync,
{
    async fn build(&self, def: ProcessorDef, service: &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
        (self.0)(def, service)
    }
}

struct OutboxKind;

#[async_trait]
impl ProcessorKind for OutboxKind {
    async fn build(&self, def: ProcessorDef, service: &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> {
        crate::outbox::build(def, service).await
    }
}

/// Kinds by name.
#[derive(Clone, Default)]
pub struct Catalog {
    kinds: BTreeMap<String, Arc<dyn ProcessorKind>>,
}

impl Catalog {
    /// No kinds.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in kinds: `outbox` and `counter`.
    pub fn builtin() -> Self {
        Self::empty()
            .with_kind("outbox", OutboxKind)
            .with_kind_fn("counter", |def, _service| crate::counter::build(def))
    }

    /// Adds (or replaces) the kind `name`.
    pub fn with_kind(mut self, name: &str, kind: impl ProcessorKind + 'static) -> Self {
        self.kinds.insert(name.to_owned(), Arc::new(kind));
        self
    }

    /// Adds the kind `name` built by `build` (see [`ProcessorKind::build`]).
    pub fn with_kind_fn<F>(self, name: &str, build: F) -> Self
    where
        F: Fn(ProcessorDef, &StreamService) -> Result<Arc<dyn ProcessorSpec>, ConfigError> + Send + Sync + 'static,
    {
        self.with_kind(name, FnKind(build))
    }

    /// The kind names, sorted.
    pub fn kinds(&self) -> Vec<&str> {
        self.kinds.keys().map(String::as_str).collect()
    }

    /// What can be checked without the store: every kind is known, every
    /// stream pattern parses, no slug is used twice.
    pub fn check(&self, config: &ProcessorsConfig) -> Result<(), ConfigError> {
        let mut slugs: BTreeMap<&str, &str> = BTreeMap::new();
        for def in &config.processors {
            if !self.kinds.contains_key(&def.kind) {
                let known = self.kinds().join(", ");
                return Err(def.error("kind", format!("unknown processor kind {:?} (known: {known})", def.kind)));
            }
            Glob::parse(&def.streams).map_err(|e| def.error("streams", e.to_string()))?;
            if let Some(other) = slugs.insert(&def.slug, &def.streams) {
                return Err(def.error(
                    "slug",
                    format!("{:?} is used twice (also for streams {other:?}); slugs name progress records", def.slug),
                ));
            }
        }
        Ok(())
    }

    /// Checks every processor of `config` ([`Self::check`], then each
    /// kind's options and the target streams in the store) and registers
    /// them. The first mistake is the error.
    pub async fn build(
        &self,
        config: &ProcessorsConfig,
        service: &StreamService,
    ) -> Result<ProcessorRegistry, ConfigError> {
        self.check(config)?;
        let mut registry = ProcessorRegistry::new();
        for def in &config.processors {
            let kind = self.kinds.get(&def.kind).ok_or_else(|| def.error("kind", "unknown processor kind"))?;
            let mut spec = kind.build(def.clone(), service).await?;
            if spec.slug() != def.slug {
                return Err(def.error(
                    "slug",
                    format!("kind {:?} built a processor named {:?}, not {:?}", def.kind, spec.slug(), def.slug),
                ));
            }
            if let Some(cadence) = def.checkpoint {
                spec = crate::checkpoint::with_cadence(spec, cadence);
            }
            registry.register(&def.streams, spec).map_err(|e| match e {
                RegistryError::Pattern(p) => def.error("streams", p.to_string()),
                other => def.error("slug", other.to_string()),
            })?;
        }
        Ok(registry)
    }

    /// [`ProcessorsConfig::from_toml`] then [`Self::build`].
    pub async fn load(
        &self,
        toml: &str,
        service: &StreamService,
    ) -> Result<(ProcessorsConfig, ProcessorRegistry), ConfigError> {
        let config = ProcessorsConfig::from_toml(toml)?;
        let registry = self.build(&config, service).await?;
        Ok((config, registry))
    }
}
