//! The processor kinds a host knows, and the registry a configuration
//! builds from them.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ds_core::InlineProcessor;
use ds_core::StreamService;
use ds_processor_host::{InlineRegistry, ProcessorRegistry, ProcessorSpec, RegistryError};
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
/// Builds an inline processor (`inline = true`) of one kind.
pub type InlineKind = Arc<dyn Fn(ProcessorDef) -> Result<Arc<dyn InlineProcessor>, ConfigError> + Send + Sync>;

#[derive(Clone, Default)]
pub struct Catalog {
    kinds: BTreeMap<String, Arc<dyn ProcessorKind>>,
    /// Kinds that can run inside the append's commit.
    inline_kinds: BTreeMap<String, InlineKind>,
}

impl Catalog {
    /// No kinds.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The built-in kinds: `outbox`, `counter`, `json-schema` and `state`.
    pub fn builtin() -> Self {
        Self::empty()
            .with_kind("outbox", OutboxKind)
            .with_kind_fn("counter", |def, _service| crate::counter::build(def))
            .with_kind_fn(crate::state::KIND, |def, _service| crate::state::build(def))
            .with_inline_kind("counter", crate::counter::build_inline)
            .with_inline_kind(crate::json_schema::KIND, |def| {
                // It keeps no state: nothing is stored per append.
                let processor = crate::json_schema::processor(def)?;
                Ok(Arc::new(ds_processor_host::InlineAdapter::stateless(processor)) as Arc<dyn InlineProcessor>)
            })
    }

    /// Adds a kind that runs inline (`inline = true`; the default when the
    /// kind has no hosted form).
    pub fn with_inline_kind<F>(mut self, name: &str, build: F) -> Self
    where
        F: Fn(ProcessorDef) -> Result<Arc<dyn InlineProcessor>, ConfigError> + Send + Sync + 'static,
    {
        self.inline_kinds.insert(name.to_owned(), Arc::new(build));
        self
    }

    /// Whether `def` runs inline: as it says, else when its kind has only
    /// an inline form.
    pub fn is_inline(&self, def: &ProcessorDef) -> bool {
        def.inline.unwrap_or_else(|| !self.kinds.contains_key(&def.kind) && self.inline_kinds.contains_key(&def.kind))
    }

    /// The inline processors of `config`, bound by their stream patterns:
    /// what [`ds_core::StreamService::set_inline_gate`] takes.
    pub fn build_inline(&self, config: &ProcessorsConfig) -> Result<InlineRegistry, ConfigError> {
        self.check(config)?;
        let mut registry = InlineRegistry::new();
        for def in config.processors.iter().filter(|d| self.is_inline(d)) {
            let build = self.inline_kinds.get(&def.kind).ok_or_else(|| def.error("inline", "not an inline kind"))?;
            let processor = build(def.clone())?;
            if processor.slug() != def.slug {
                return Err(
                    def.error("slug", format!("kind {:?} built {:?}, not {:?}", def.kind, processor.slug(), def.slug))
                );
            }
            let pattern = Glob::parse(&def.streams).map_err(|e| def.error("streams", e.to_string()))?;
            registry.register(&def.kind, pattern, processor).map_err(|e| def.error("slug", e.to_string()))?;
        }
        Ok(registry)
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
        let mut kinds: Vec<&str> = self.kinds.keys().chain(self.inline_kinds.keys()).map(String::as_str).collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds
    }

    /// What can be checked without the store: every kind is known, every
    /// stream pattern parses, no slug is used twice.
    pub fn check(&self, config: &ProcessorsConfig) -> Result<(), ConfigError> {
        let mut slugs: BTreeMap<&str, &str> = BTreeMap::new();
        for def in &config.processors {
            let (hosted, inline) = (self.kinds.contains_key(&def.kind), self.inline_kinds.contains_key(&def.kind));
            if !hosted && !inline {
                let known = self.kinds().join(", ");
                return Err(def.error("kind", format!("unknown processor kind {:?} (known: {known})", def.kind)));
            }
            match (self.is_inline(def), hosted, inline) {
                (true, _, false) => {
                    return Err(def.error("inline", format!("kind {:?} cannot run inline", def.kind)));
                }
                (false, false, _) => {
                    return Err(def.error("inline", format!("kind {:?} runs only inline", def.kind)));
                }
                _ => {}
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
        for def in config.processors.iter().filter(|d| !self.is_inline(d)) {
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
