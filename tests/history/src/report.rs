//! The Markdown report of a set of campaigns.

use std::fmt::Write;

use crate::campaign::Report;

/// The campaigns whose checked operations the acceptance counts: the local
/// store under kill -9, the AWS store under AWS faults and under network
/// faults.
pub const COUNTED: [&str; 3] = ["local-kill9", "aws-faults", "network"];

/// Operations checked by the [`COUNTED`] campaigns.
pub fn checked_ops(reports: &[Report]) -> u64 {
    reports.iter().filter(|r| COUNTED.contains(&r.name.as_str())).map(|r| r.summary.ops).sum()
}

/// Source events the processor campaign processed.
pub fn processor_events(reports: &[Report]) -> u64 {
    reports.iter().filter_map(|r| r.extra.get("processor events")).sum()
}

pub fn violations(reports: &[Report]) -> usize {
    reports.iter().map(|r| r.violations).sum()
}

fn join<K: std::fmt::Display>(m: impl IntoIterator<Item = (K, u64)>) -> String {
    let parts: Vec<String> = m.into_iter().map(|(k, n)| format!("{k} {n}")).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// The report: a table of every campaign, then how each ran.
pub fn markdown(title: &str, preamble: &str, reports: &[Report]) -> String {
    let mut out = format!("# {title}\n\n{preamble}\n\n");
    let _ = writeln!(
        out,
        "**Totals:** {} operations checked under kill -9, AWS faults and network faults ({} in all history \
         campaigns), {} processor events on AWS under faults, {} violations.\n",
        checked_ops(reports),
        reports.iter().map(|r| r.summary.ops).sum::<u64>(),
        processor_events(reports),
        violations(reports)
    );
    out.push_str(
        "| campaign | operations checked | acknowledged / failed / unknown | faults injected | violations | time |\n",
    );
    out.push_str("|---|---:|---|---|---:|---:|\n");
    for r in reports {
        if let Some(why) = &r.skipped {
            let _ = writeln!(out, "| {} | skipped: {why} | | | | |", r.name);
            continue;
        }
        let s = &r.summary;
        let ops = if s.ops > 0 {
            s.ops.to_string()
        } else {
            format!("{} events", r.extra.get("processor events").unwrap_or(&0))
        };
        let _ = writeln!(
            out,
            "| {} | {ops} | {} / {} / {} | {} | {} | {:.0} s |",
            r.name,
            s.acknowledged,
            s.failed,
            s.unknown,
            join(r.faults.iter().map(|(k, n)| (k, *n))),
            r.violations,
            r.elapsed.as_secs_f64()
        );
    }
    for r in reports.iter().filter(|r| r.skipped.is_none()) {
        let _ = writeln!(out, "\n## {}\n\n{}\n", r.name, r.setup);
        let s = &r.summary;
        if s.ops > 0 {
            let _ = writeln!(out, "- operations by kind: {}", join(s.by_kind.iter().map(|(k, n)| (k, *n))));
            let _ = writeln!(
                out,
                "- answers that were not success, by status: {}",
                join(s.fail_statuses.iter().map(|(k, n)| (k, *n)))
            );
            let _ = writeln!(
                out,
                "- {} streams, {} records in their final state; {} read responses ({} bytes) compared with them",
                s.streams, s.records, s.segments, s.bytes_compared
            );
        }
        if !r.extra.is_empty() {
            let _ = writeln!(out, "- {}", join(r.extra.iter().map(|(k, n)| (k, *n))));
        }
        let _ = writeln!(out, "- violations: {}", r.violations);
        if !r.findings.is_empty() {
            out.push_str("\n```\n");
            for (finding, n) in crate::campaign::grouped(&r.findings) {
                let _ = writeln!(out, "{finding}{}", crate::campaign::times(n));
            }
            out.push_str("```\n");
        }
    }
    out
}
