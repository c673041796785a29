//! [`InlineOperator`]: the operator API over a host's hosted processors and
//! its inline ones together. Inline processors answer from their reduction
//! record (`ds_core::StreamService::inline_view`) and are controlled through
//! the core (`inline_control`), fenced like an append; everything else goes
//! to the hosted operator.

use std::sync::Arc;

use async_trait::async_trait;
use ds_core::{InlineControl, InlineProcessor, StreamMeta, StreamService};
use serde_json::Value;

use crate::inline::{InlineHosted, InlineRegistry};
use crate::operator::{
    common_prefix, list_streams, processed_stream, Control, InlineStatus, OperatorError, ProcessorDetail,
    ProcessorOperator, ProcessorPage, ProcessorStatus,
};

/// Hosted and inline processors behind one operator API.
pub struct InlineOperator {
    hosted: Option<Arc<dyn ProcessorOperator>>,
    inline: Arc<InlineRegistry>,
    service: StreamService,
}

impl InlineOperator {
    pub fn new(
        hosted: Option<Arc<dyn ProcessorOperator>>,
        inline: Arc<InlineRegistry>,
        service: StreamService,
    ) -> Self {
        Self { hosted, inline, service }
    }

    fn resolve(&self, slug: &str, stream: &str) -> Option<Result<&Arc<InlineHosted>, OperatorError>> {
        let hosted = self.inline.hosted(slug)?;
        if !hosted.pattern.matches(stream) {
            return Some(Err(OperatorError::NotRegistered {
                slug: slug.to_owned(),
                stream: stream.to_owned(),
                pattern: hosted.pattern.to_string(),
            }));
        }
        Some(Ok(hosted))
    }

    async fn detail(&self, hosted: &InlineHosted, stream: &str) -> Result<ProcessorDetail, OperatorError> {
        processed_stream(&self.service, stream).await?;
        let view = self.service.inline_view(hosted.slug(), stream).await?;
        let (reducer_version, state) = match &view.reduction {
            Some(r) => (r.reducer_version.clone(), serde_json::from_slice(&r.state).unwrap_or(Value::Null)),
            None => (String::new(), Value::Null),
        };
        Ok(ProcessorDetail { status: status(hosted, &view.meta, view.reduction.as_ref()), reducer_version, state })
    }

    /// Inline statuses of the streams after `after`, at most `limit`
    /// streams; `next` when more may follow.
    async fn inline_page(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError> {
        let entries = self.inline.entries();
        let Some(prefix) = common_prefix(entries.iter().map(|e| e.pattern.literal_prefix())) else {
            return Ok(ProcessorPage { processors: Vec::new(), next: None });
        };
        let matches = |path: &str| entries.iter().any(|e| e.pattern.matches(path));
        let statuses = |meta: StreamMeta| async move {
            let mut out = Vec::new();
            for hosted in entries.iter().filter(|e| e.pattern.matches(&meta.path)) {
                let view = self.service.inline_view(hosted.slug(), &meta.path).await?;
                out.push(status(hosted, &view.meta, view.reduction.as_ref()));
            }
            Ok(out)
        };
        list_streams(&self.service, &prefix, after, limit, matches, statuses).await
    }
}

/// An inline processor's status on one stream.
fn status(hosted: &InlineHosted, meta: &StreamMeta, reduction: Option<&ds_core::InlineReduction>) -> ProcessorStatus {
    // A stateless processor is always through the tail: it keeps nothing.
    let stateless = hosted.processor().initial_state().is_none();
    let reduced = match reduction {
        Some(r) => r.reduced_through.min(meta.tail),
        None if stateless => meta.tail,
        None => 0,
    };
    let skipped = reduction.and_then(|r| r.skipped.clone());
    ProcessorStatus {
        processor: hosted.slug().to_owned(),
        stream: meta.path.to_string(),
        pattern: hosted.pattern.to_string(),
        tail: meta.tail,
        reduced_through: reduced,
        acknowledged_through: reduced,
        lag: meta.tail.saturating_sub(reduced),
        cursor_revision: 0,
        running: false,
        phase: Some(if skipped.is_some() { "skipped" } else { "inline" }.to_owned()),
        in_flight: None,
        retry_count: 0,
        last_error: None,
        pending_background: 0,
        inline: Some(InlineStatus {
            kind: hosted.kind.clone(),
            rejections: hosted.rejections(),
            last_rejection: hosted.last_rejection(),
            skipped,
        }),
        materialized: None,
    }
}

/// Merges two pages of one listing: each covers the streams up to its
/// `next` (all of them without one), so the merge is whole up to the
/// smaller `next`, and holds at most `limit` streams.
fn merge(a: ProcessorPage, b: ProcessorPage, limit: usize) -> ProcessorPage {
    let cut = match (a.next, b.next) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    let mut all: Vec<ProcessorStatus> = a.processors.into_iter().chain(b.processors).collect();
    all.retain(|s| cut.as_ref().is_none_or(|c| s.stream <= *c));
    all.sort_by(|x, y| (&x.stream, &x.processor).cmp(&(&y.stream, &y.processor)));
    let mut streams = 0;
    let mut out: Vec<ProcessorStatus> = Vec::with_capacity(all.len());
    let mut next = cut;
    for s in all {
        if out.last().is_none_or(|l| l.stream != s.stream) {
            if streams == limit {
                next = out.last().map(|l| l.stream.clone());
                break;
            }
            streams += 1;
        }
        out.push(s);
    }
    ProcessorPage { processors: out, next }
}

#[async_trait]
impl ProcessorOperator for InlineOperator {
    async fn list(&self, after: Option<&str>, limit: usize) -> Result<ProcessorPage, OperatorError> {
        let inline = self.inline_page(after, limit).await?;
        let Some(hosted) = &self.hosted else { return Ok(inline) };
        Ok(merge(hosted.list(after, limit).await?, inline, limit))
    }

    async fn show(&self, slug: &str, stream: &str) -> Result<ProcessorDetail, OperatorError> {
        match (self.resolve(slug, stream), &self.hosted) {
            (Some(hosted), _) => self.detail(hosted?, stream).await,
            (None, Some(operator)) => operator.show(slug, stream).await,
            (None, None) => Err(OperatorError::UnknownProcessor { slug: slug.to_owned() }),
        }
    }

    async fn control(&self, slug: &str, stream: &str, control: Control) -> Result<ProcessorDetail, OperatorError> {
        match (self.resolve(slug, stream), &self.hosted) {
            (Some(_), _) => match control {
                Control::ReReduce { .. } => self.inline_control(slug, stream, InlineControl::ReReduce).await,
                Control::ReprocessFrom { .. } | Control::SkipThrough { .. } => Err(OperatorError::Unavailable(
                    format!("processor {slug:?} runs inline: it has no cursor to move (use reset, skip or re-reduce)"),
                )),
            },
            (None, Some(operator)) => operator.control(slug, stream, control).await,
            (None, None) => Err(OperatorError::UnknownProcessor { slug: slug.to_owned() }),
        }
    }

    async fn inline_control(
        &self,
        slug: &str,
        stream: &str,
        control: InlineControl,
    ) -> Result<ProcessorDetail, OperatorError> {
        let hosted = match self.resolve(slug, stream) {
            Some(hosted) => hosted?,
            None if self.hosted.is_some() => {
                return Err(OperatorError::NotInline {
                    slug: slug.to_owned(),
                    control: crate::operator::inline_control_name(&control),
                })
            }
            None => return Err(OperatorError::UnknownProcessor { slug: slug.to_owned() }),
        };
        processed_stream(&self.service, stream).await?;
        let processor: Arc<dyn ds_core::InlineProcessor> = Arc::clone(hosted) as _;
        self.service.inline_control(processor.as_ref(), stream, control).await?;
        self.detail(hosted, stream).await
    }

    /// Inline processors keep no materialized view: the hosted ones answer.
    async fn state(
        &self,
        slug: &str,
        stream: &str,
        query: crate::StateQuery,
    ) -> Result<crate::StateAnswer, OperatorError> {
        match &self.hosted {
            Some(hosted) if self.inline.hosted(slug).is_none() => hosted.state(slug, stream, query).await,
            _ => Err(OperatorError::NotMaterialized { slug: slug.to_owned() }),
        }
    }

    async fn compact(&self, slug: &str, stream: &str) -> Result<crate::CompactionReport, OperatorError> {
        match &self.hosted {
            Some(hosted) if self.inline.hosted(slug).is_none() => hosted.compact(slug, stream).await,
            _ => Err(OperatorError::NotMaterialized { slug: slug.to_owned() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(stream: &str, processor: &str) -> ProcessorStatus {
        ProcessorStatus {
            processor: processor.into(),
            stream: stream.into(),
            pattern: "**".into(),
            tail: 0,
            reduced_through: 0,
            acknowledged_through: 0,
            lag: 0,
            cursor_revision: 0,
            running: false,
            phase: None,
            in_flight: None,
            retry_count: 0,
            last_error: None,
            pending_background: 0,
            inline: None,
            materialized: None,
        }
    }

    #[test]
    fn a_merged_page_is_whole_up_to_the_smaller_next() {
        let a = ProcessorPage { processors: vec![s("a", "h"), s("c", "h")], next: Some("c".into()) };
        let b = ProcessorPage { processors: vec![s("a", "i"), s("b", "i"), s("d", "i")], next: None };
        let page = merge(a, b, 10);
        let got: Vec<_> = page.processors.iter().map(|s| (s.stream.as_str(), s.processor.as_str())).collect();
        assert_eq!(got, [("a", "h"), ("a", "i"), ("b", "i"), ("c", "h")], "d lies past the hosted page's end");
        assert_eq!(page.next.as_deref(), Some("c"));
        let page = merge(
            ProcessorPage { processors: vec![s("a", "h")], next: None },
            ProcessorPage { processors: vec![s("b", "i")], next: None },
            1,
        );
        assert_eq!(page.processors.len(), 1);
        assert_eq!(page.next.as_deref(), Some("a"), "cut at the limit");
    }
}
