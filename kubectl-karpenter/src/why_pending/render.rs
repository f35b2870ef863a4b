//! Text output of `why-pending`: one block per pod — `NAMESPACE/NAME: what it waits for or
//! why it cannot schedule`, then one indented line per NodePool verdict — and a summary line.
//! Rejections are red and compatible NodePools green when colour is on. Pure: writes to a
//! `Write`.

use std::io::{self, Write};

use crossterm::style::{Color, Stylize};
use karpenter_core::scheduling::explain::Verdict;

use super::report::{PodReport, PodState};

/// Writes the reports as text, with a summary line after them.
///
/// Errors: writing failed.
pub fn write_text(out: &mut impl Write, reports: &[PodReport], color: bool) -> io::Result<()> {
    for r in reports {
        let head = format!("{}/{}", r.namespace, r.name);
        let head = if color { head.bold().to_string() } else { head };
        writeln!(out, "{head}: {}", r.message)?;
        for line in &r.nodepools {
            let text = format!("nodepool {}: {}", line.verdict.nodepool, line.message);
            let tint = match line.verdict.verdict {
                Verdict::Compatible { .. } => Color::Green,
                Verdict::Rejected(_) => Color::Red,
            };
            if color {
                writeln!(out, "  {}", text.with(tint))?;
            } else {
                writeln!(out, "  {text}")?;
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "{}", summary(reports))
}

/// `3 pending pods: 1 waiting for capacity, 1 provisionable, 1 with no NodePool that can take
/// it` (parts with a zero count left out).
pub fn summary(reports: &[PodReport]) -> String {
    let count = |states: &[PodState]| reports.iter().filter(|r| states.contains(&r.state)).count();
    let pending = reports.len() - count(&[PodState::Bound]);
    let parts: Vec<String> = [
        (
            count(&[PodState::WaitingForNodeClaim, PodState::WaitingForNode]),
            "waiting for capacity",
        ),
        (count(&[PodState::Provisionable]), "provisionable"),
        (
            count(&[PodState::Unschedulable]),
            "with no NodePool that can take it",
        ),
        (
            count(&[PodState::ConflictingRequirements]),
            "with conflicting node requirements",
        ),
        (
            count(&[PodState::NotProvisionable]),
            "Karpenter cannot provision for",
        ),
        (count(&[PodState::Ignored]), "DaemonSet or static"),
        (count(&[PodState::Gated]), "gated by schedulingGates"),
        (count(&[PodState::OtherScheduler]), "for another scheduler"),
        (
            count(&[PodState::NotYetUnschedulable]),
            "not yet marked unschedulable",
        ),
        (count(&[PodState::Bound]), "bound (not pending)"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let noun = if pending == 1 { "pod" } else { "pods" };
    format!("{pending} pending {noun}: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use karpenter_core::scheduling::explain::{PoolVerdict, Reason};

    use super::super::report::PoolLine;
    use super::*;

    fn report(name: &str, state: PodState, message: &str) -> PodReport {
        PodReport {
            namespace: "shop".into(),
            name: name.into(),
            state,
            message: message.into(),
            nodeclaim: None,
            node: None,
            nodepools: Vec::new(),
        }
    }

    #[test]
    fn text_snapshot() {
        let mut stuck = report(
            "cart-0",
            PodState::Unschedulable,
            "no NodePool can launch capacity for it",
        );
        stuck.nodepools = vec![PoolLine {
            verdict: PoolVerdict {
                nodepool: "infra".into(),
                verdict: Verdict::Rejected(Reason::Taint {
                    taint: "dedicated=infra:NoSchedule".into(),
                }),
            },
            message: "taint not tolerated: dedicated=infra:NoSchedule".into(),
        }];
        let reports = vec![
            stuck,
            report(
                "web-1",
                PodState::WaitingForNodeClaim,
                "waiting for NodeClaim default-x7k2p (Launching)",
            ),
        ];
        let mut out = Vec::new();
        write_text(&mut out, &reports, false).expect("write");
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "shop/cart-0: no NodePool can launch capacity for it\n  \
             nodepool infra: taint not tolerated: dedicated=infra:NoSchedule\n\
             shop/web-1: waiting for NodeClaim default-x7k2p (Launching)\n\n\
             2 pending pods: 1 waiting for capacity, 1 with no NodePool that can take it\n"
        );
        crossterm::style::force_color_output(true);
        let mut coloured = Vec::new();
        write_text(&mut coloured, &reports, true).expect("write");
        assert!(String::from_utf8_lossy(&coloured).contains("\u{1b}["));
    }
}
