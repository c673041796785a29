//! Markdown tables: per metric, each server's median and min–max over
//! rounds, and on our rows the ratio to the best peer of the same class
//! (memory vs memory, durable vs durable).

use crate::bench::Results;
use crate::cpu::{is_busy, BUSY_LIMIT};
use crate::metrics::Metric;
use crate::server::{Class, ServerSpec};
use crate::stats::{median, min_max};
use std::fmt::Write;

/// Summary of one server's samples for one metric.
enum Cell {
    /// Not measured (workload not selected, or n/a such as Node's binary size).
    None,
    Failed {
        failed: usize,
        total: usize,
        first: String,
    },
    Ok {
        median: f64,
        min: f64,
        max: f64,
        n: usize,
    },
}

fn cell(results: &Results, server: usize, m: Metric) -> Cell {
    let s = results.get(server, m);
    if s.is_empty() {
        return Cell::None;
    }
    let errs: Vec<&String> = s.iter().filter_map(|r| r.as_ref().err()).collect();
    if let Some(first) = errs.first() {
        return Cell::Failed { failed: errs.len(), total: s.len(), first: (*first).clone() };
    }
    let v: Vec<f64> = s.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    let (min, max) = min_max(&v);
    Cell::Ok { median: median(&v), min, max, n: v.len() }
}

/// Ours vs the best peer of the class, as text, plus the "how many times
/// worse" factor (>1 means we are behind) for finding our weakest metric.
pub struct Ratio {
    pub text: String,
    pub behind: Option<f64>,
}

fn ratio(results: &Results, specs: &[ServerSpec], m: Metric, class: Class) -> Option<Ratio> {
    let info = m.info();
    let ours = specs.iter().position(|s| s.ours && s.class == class)?;
    let mut best: Option<(f64, &str)> = None;
    for (i, s) in specs.iter().enumerate() {
        if s.ours || s.class != class {
            continue;
        }
        if let Cell::Ok { median, .. } = cell(results, i, m) {
            let better = match best {
                None => true,
                Some((b, _)) => {
                    if info.higher_is_better {
                        median > b
                    } else {
                        median < b
                    }
                }
            };
            if better {
                best = Some((median, &s.name));
            }
        }
    }
    let text = |t: String| Some(Ratio { text: t, behind: None });
    let ours_v = match cell(results, ours, m) {
        Cell::Ok { median, .. } => median,
        Cell::Failed { .. } => return text("n/a (ours failed)".into()),
        Cell::None => return None,
    };
    let Some((best_v, best_name)) = best else {
        return text("n/a (no peer measured)".into());
    };
    if best_v == 0.0 || ours_v == 0.0 || ours_v.signum() != best_v.signum() {
        return text(format!("n/a (ours {ours_v:.1}, {best_name} {best_v:.1})"));
    }
    let bound: Vec<&str> = [("ours", ours_v), (best_name, best_v)]
        .into_iter()
        .filter(|(_, v)| results.load_bound(m, *v))
        .map(|(n, _)| n)
        .collect();
    let bound = if bound.is_empty() { String::new() } else { format!("; load-bound: {}", bound.join(", ")) };
    let r = ours_v / best_v;
    // Factor by which ours is better (>1) or worse (<1), whatever the direction.
    let goodness = if info.higher_is_better { r } else { 1.0 / r };
    let words = if (goodness - 1.0).abs() < 0.005 {
        format!("same as {best_name}")
    } else if goodness > 1.0 {
        format!("{goodness:.2}× better than {best_name}")
    } else {
        format!("{:.2}× worse than {best_name}", 1.0 / goodness)
    };
    Some(Ratio { text: format!("{r:.2} ({words}{bound})"), behind: Some(1.0 / goodness) })
}

fn fmt(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    // Thousands separators on the integer part, for readability.
    let (int, frac) = s.split_once('.').map_or((s.as_str(), None), |(a, b)| (a, Some(b)));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

fn escape(s: &str) -> String {
    let one_line = s.replace(['\n', '\r'], " ").replace('|', "\\|");
    if one_line.chars().count() > 160 {
        format!("{}…", one_line.chars().take(160).collect::<String>())
    } else {
        one_line
    }
}

/// The results as markdown: a summary of our ratios, then one table per metric.
pub fn markdown(results: &Results, specs: &[ServerSpec], preamble: &str) -> String {
    let mut md = String::new();
    md.push_str(preamble.trim_end());
    md.push_str("\n\n");
    guard_lines(&mut md, results);
    let measured: Vec<Metric> =
        Metric::ALL.into_iter().filter(|&m| (0..specs.len()).any(|i| !results.get(i, m).is_empty())).collect();

    // Ratios need both sides: skipped for a peers-only or ours-only run.
    if specs.iter().any(|s| !s.ours) && specs.iter().any(|s| s.ours) {
        summary(&mut md, results, specs, &measured);
    }
    tables(&mut md, results, specs, &measured);
    md
}

/// The calibration line and the busy-machine verdict, before any figure.
fn guard_lines(md: &mut String, results: &Results) {
    match &results.calibration {
        Some(cal) => md.push_str(&cal.markdown()),
        None => md.push_str("**Calibration:** not run (no load-bound check on these figures)."),
    }
    md.push_str("\n\n");
    let (busy, runs) = results.busy_runs();
    let cal_busy = results
        .calibration
        .as_ref()
        .map_or(0, |c| c.tool.iter().chain(c.wrk.iter().map(|(_, p)| p)).filter(|p| is_busy(p.others)).count());
    let _ = write!(
        md,
        "**Busy-machine guard:** other processes' CPU is measured during every run (`/proc/stat` minus the server's and ds-load's own); runs above {BUSY_LIMIT} core are repeated up to {} times and the quietest kept. ",
        std::env::var("DS_BENCH_BUSY_RETRIES").unwrap_or_else(|_| "2".into())
    );
    if busy + cal_busy == 0 {
        let _ = writeln!(md, "All {runs} measured runs were quiet.\n");
    } else {
        let _ = writeln!(
            md,
            "**NOT A QUIET-MACHINE REPORT: {busy} of {runs} runs{} still had other work above {BUSY_LIMIT} core (marked ⚠ in the tables).**\n",
            if cal_busy > 0 { format!(" and {cal_busy} calibration runs") } else { String::new() }
        );
    }
}

/// The others' CPU of each run behind a cell, busy ones marked.
fn others_cell(results: &Results, server: usize, m: Metric) -> String {
    let v: Vec<String> = results
        .others(server, m)
        .iter()
        .map(|o| match o {
            Some(o) if is_busy(Some(*o)) => format!("{o:.2}⚠"),
            Some(o) => format!("{o:.2}"),
            None => "–".into(),
        })
        .collect();
    v.join(" ")
}

fn summary(md: &mut String, results: &Results, specs: &[ServerSpec], measured: &[Metric]) {
    let classes = [Class::Memory, Class::Durable];
    let _ = writeln!(md, "## Summary: ours ÷ best peer (median of rounds)\n");
    md.push_str("Ratio = our median ÷ the best peer's median in the same class; the words say which way is better for that metric.\n\n");
    md.push_str("| metric | memory | durable |\n|---|---|---|\n");
    let mut worst: Option<(f64, Metric, Class, String)> = None;
    for &m in measured {
        let mut row = format!("| {} ({}) |", m.info().title, m.info().unit);
        for class in classes {
            let r = ratio(results, specs, m, class);
            let t = r.as_ref().map_or("n/a".to_string(), |r| r.text.clone());
            if let Some(Ratio { behind: Some(b), text }) = r {
                if m.is_performance() && worst.as_ref().is_none_or(|w| b > w.0) {
                    worst = Some((b, m, class, text));
                }
            }
            let _ = write!(row, " {} |", escape(&t));
        }
        md.push_str(&row);
        md.push('\n');
    }
    if let Some((b, m, class, text)) = worst {
        let verdict = if b > 1.0 {
            "Furthest behind the best peer (speed and memory metrics)"
        } else {
            "Closest to the best peer (we lead on every speed and memory metric)"
        };
        let _ = writeln!(md, "\n**{verdict}:** {} ({}), {}: {text}.", m.info().title, m.info().unit, class.label());
    }
}

fn tables(md: &mut String, results: &Results, specs: &[ServerSpec], measured: &[Metric]) {
    let classes = [Class::Memory, Class::Durable];
    for &m in measured {
        let info = m.info();
        let dir = if info.higher_is_better { "higher is better" } else { "lower is better" };
        let _ = writeln!(md, "\n### {} — {}, {dir}\n", info.title, info.unit);
        md.push_str(
            "| class | server | median | min–max | rounds | others' CPU per run (cores) | ours ÷ best peer |\n|---|---|---:|---:|---:|---|---|\n",
        );
        for class in classes {
            for (i, s) in specs.iter().enumerate().filter(|(_, s)| s.class == class) {
                let name = if s.ours { format!("**{}**", s.name) } else { s.name.clone() };
                let (med, range, rounds) = match cell(results, i, m) {
                    Cell::None => ("n/a".to_string(), String::new(), String::new()),
                    Cell::Failed { failed, total, first } => {
                        ("**FAIL**".to_string(), escape(&first), format!("{failed}/{total} failed"))
                    }
                    Cell::Ok { median, min, max, n } => (
                        if results.load_bound(m, median) {
                            format!("{} **load-bound**", fmt(median, info.decimals))
                        } else {
                            fmt(median, info.decimals)
                        },
                        format!("{}–{}", fmt(min, info.decimals), fmt(max, info.decimals)),
                        n.to_string(),
                    ),
                };
                let r = if s.ours {
                    ratio(results, specs, m, class).map_or(String::new(), |r| escape(&r.text))
                } else {
                    String::new()
                };
                let others = others_cell(results, i, m);
                let _ = writeln!(md, "| {} | {name} | {med} | {range} | {rounds} | {others} | {r} |", class.label());
            }
        }
    }
}

/// One attached run (`ds-load run`): each metric's value, or FAIL and why.
pub fn single(results: &Results, spec: &ServerSpec, knobs: &str) -> String {
    let mut md = format!(
        "# ds-load run against {}{}\n\n{knobs}\n\n| metric | value | unit | others' CPU (cores) |\n|---|---:|---|---|\n",
        spec.name, spec.prefix
    );
    for m in Metric::ALL {
        let info = m.info();
        let v = match cell(results, 0, m) {
            Cell::None => continue,
            Cell::Failed { first, .. } => format!("**FAIL**: {}", escape(&first)),
            Cell::Ok { median, .. } => fmt(median, info.decimals),
        };
        let _ = writeln!(md, "| {} | {v} | {} | {} |", info.title, info.unit, others_cell(results, 0, m));
    }
    let verdict = if results.any_failed(0) {
        "RESULT: FAIL (a request failed or a stream does not hold exactly the acknowledged appends)"
    } else {
        "RESULT: OK (every request succeeded; every stream holds exactly the acknowledged appends)"
    };
    let _ = writeln!(md, "\n{verdict}");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_thousands() {
        assert_eq!(fmt(1234567.0, 0), "1,234,567");
        assert_eq!(fmt(-1234.5, 1), "-1,234.5");
        assert_eq!(fmt(12.0, 1), "12.0");
    }
}
