//! Every committed bench report states the load tool's calibration (issue
//! 11): a report without it cannot say whether its figures measure the
//! server or the tool.

#[test]
fn every_committed_report_has_a_calibration_line() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/results");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("bench/results exists") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable report");
        assert!(
            text.lines().any(|l| l.starts_with("**Calibration:**")),
            "{} has no **Calibration:** line",
            path.display()
        );
        // A report measured over the AWS emulator also states the emulator's
        // own ceiling (issue 41): its figures may be the emulator's.
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.contains("aws-scale") {
            assert!(
                text.lines().any(|l| l.starts_with("**Emulator calibration**")),
                "{} has no **Emulator calibration** line",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no reports in {}", dir.display());
}
