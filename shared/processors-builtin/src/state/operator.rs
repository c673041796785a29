//! [`StateOperator`]: a host's operator with its `state` processors'
//! views: list and show carry each view's size and malformed count, and
//! [`ProcessorOperator::state`] reads the live state.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{InlineControl, StreamService};
use ds_processor_host::{
    processed_stream, CompactionReport, Control, OperatorError, ProcessorDetail, ProcessorOperator, ProcessorPage,
    ProcessorStatus, StateAnswer, StateCursor, StateQuery,
};
use serde_json::{Map, Value};

use super::view::{StateViews, View};

/// Another operator, plus the views of the `state` processors.
pub struct StateOperator {
    inner: Arc<dyn ProcessorOperator>,
    views: Arc<StateViews>,
    service: StreamService,
}

impl StateOperator {
    pub fn new(inner: Arc<dyn ProcessorOperator>, views: Arc<StateViews>, service: StreamService) -> Self {
        Self { inner, views, service }
    }

    /// Adds the view's summary to a `state` processor's status. A view that
    /// cannot be read says why in `lastError` rather than failing the list.
    async fn annotate(&self, status: &mut ProcessorStatus) {
        match self.views.status(&status.processor, &status.stream, &self.service).await {
            Some(Ok(materialized)) => status.materialized = Some(materialized),
            Some(Err(e)) => status.last_error = Some(e.to_string()),
            None => {}
        }
    }
}

#[async_trait]
impl ProcessorOperator for StateOperator {
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError> {
        let mut page = self.inner.list(after, limit).await?;
        for status in &mut page.processors {
            self.annotate(status).await;
        }
        Ok(page)
    }

    async fn show(&self, slug: &str, stream: &str) -> Result<ProcessorDetail, OperatorError> {
        let mut detail = self.inner.show(slug, stream).await?;
        self.annotate(&mut detail.status).await;
        Ok(detail)
    }

    async fn control(&self, slug: &str, stream: &str, control: Control) -> Result<ProcessorDetail, OperatorError> {
        let mut detail = self.inner.control(slug, stream, control).await?;
        self.annotate(&mut detail.status).await;
        Ok(detail)
    }

    async fn inline_control(
        &self,
        slug: &str,
        stream: &str,
        control: InlineControl,
    ) -> Result<ProcessorDetail, OperatorError> {
        self.inner.inline_control(slug, stream, control).await
    }

    async fn state(&self, slug: &str, stream: &str, query: StateQuery) -> Result<StateAnswer, OperatorError> {
        let Some(binding) = self.views.binding(slug) else {
            // Unknown slug or stream: the inner operator's error says which.
            self.inner.show(slug, stream).await?;
            return Err(OperatorError::NotMaterialized { slug: slug.to_owned() });
        };
        if !binding.pattern.matches(stream) {
            return Err(OperatorError::NotRegistered {
                slug: slug.to_owned(),
                stream: stream.to_owned(),
                pattern: binding.pattern.to_string(),
            });
        }
        processed_stream(&self.service, stream).await?;
        let view = self.views.current(slug, stream, &self.service).await?;
        let (state, next) = read(&view, slug, stream, query)?;
        Ok(StateAnswer { processor: slug.to_owned(), stream: stream.to_owned(), summary: view.status(), state, next })
    }

    async fn compact(&self, slug: &str, stream: &str) -> Result<CompactionReport, OperatorError> {
        if self.views.binding(slug).is_none() {
            // Unknown slug or stream: the inner operator's error says which.
            self.inner.show(slug, stream).await?;
            return Err(OperatorError::NotMaterialized { slug: slug.to_owned() });
        }
        self.views.compact(slug, stream, &self.service, true).await
    }
}

/// The part of `view` that `query` asks for, and the cursor past it.
fn read(
    view: &View,
    slug: &str,
    stream: &str,
    query: StateQuery,
) -> Result<(Value, Option<StateCursor>), OperatorError> {
    let fold = &view.fold;
    match query {
        StateQuery::Row { entity_type, key } => match fold.get(&entity_type, &key) {
            Some(value) => Ok((value.clone(), None)),
            None => {
                Err(OperatorError::RowNotFound { slug: slug.to_owned(), stream: stream.to_owned(), entity_type, key })
            }
        },
        StateQuery::Type { entity_type, after, limit } => {
            let mut rows = Map::new();
            let mut iter = fold.rows_after(&entity_type, after.as_deref());
            for (key, value) in iter.by_ref().take(limit) {
                rows.insert(key.to_owned(), value.clone());
            }
            let next = match iter.next() {
                Some(_) => rows.keys().next_back().map(|key| StateCursor { entity_type, key: key.clone() }),
                None => None,
            };
            Ok((Value::Object(rows), next))
        }
        StateQuery::Whole { after, limit } => {
            let mut types = Map::new();
            let (mut taken, mut last) = (0, None::<StateCursor>);
            let start_type = after.as_ref().map(|c| c.entity_type.clone());
            for (entity_type, _) in fold.types() {
                if start_type.as_deref().is_some_and(|t| entity_type < t) {
                    continue;
                }
                let after_key = after.as_ref().filter(|c| c.entity_type == entity_type).map(|c| c.key.as_str());
                for (key, value) in fold.rows_after(entity_type, after_key) {
                    if taken == limit {
                        return Ok((Value::Object(types), last));
                    }
                    let rows = types.entry(entity_type.to_owned()).or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(rows) = rows {
                        rows.insert(key.to_owned(), value.clone());
                    }
                    taken += 1;
                    last = Some(StateCursor { entity_type: entity_type.to_owned(), key: key.to_owned() });
                }
            }
            Ok((Value::Object(types), None))
        }
    }
}
