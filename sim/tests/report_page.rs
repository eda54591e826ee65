//! `shoal-sim run --out DIR` writes `report.html`: one self-contained page with the charts, the
//! explained terms and the JSON, and no reference to anything online.

mod support;

#[test]
fn the_report_page_is_written_self_contained_with_its_charts_and_terms() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
name = "page"
duration = "25s"
[mesh]
nodes = 6
[[workloads]]
spec = """
name = "web"
replicas = 4
[process]
command = ["httpd"]
[resources]
cpu = "100m"
memory = "64Mi"
"""
[[events]]
at = "8s"
action = "crash"
target = "owner=web"
restart_after = "5s"
[[events]]
at = "9s"
action = "starve"
target = "one"
frozen = "300ms"
period = "500ms"
duration = "4s"
"#;
    let path = dir.path().join("page.toml");
    std::fs::write(&path, text).unwrap();
    let out = support::sim()
        .args(["run", path.to_str().unwrap(), "--seed", "1", "--out"])
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let page = std::fs::read_to_string(dir.path().join("out/report.html")).expect("report.html");
    let same = std::fs::read_to_string(dir.path().join("out/page-seed1.html")).unwrap();
    assert_eq!(page, same);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    // Four charts: replicas over time, replacement times, bytes, false verdicts.
    assert_eq!(page.matches("<svg ").count(), 4, "charts");
    assert_eq!(
        page.matches("<svg ").count(),
        page.matches("</svg>").count()
    );
    for heading in [
        "id=\"timeline\"",
        "id=\"replacement\"",
        "id=\"traffic\"",
        "id=\"verdicts\"",
        "id=\"problems\"",
        "id=\"json\"",
    ] {
        assert!(page.contains(heading), "{heading}");
    }
    // The crash's replicas were replaced: the histogram has bars.
    assert!(page.contains("replacement time, normal replicas"));
    assert!(
        page.contains("<rect class=\"bar\""),
        "no bar in the histogram"
    );
    // Every term of the summary is explained on the page.
    for (term, _) in shoal_sim::report::GLOSSARY {
        let shown = term
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(page.contains(&format!("<dt>{shown}</dt>")), "{term}");
    }
    assert!(page.contains("replica-seconds missing") && page.contains("liveness: whole"));
    // The JSON report is embedded, escaped.
    assert!(page.contains("&quot;false_member_deaths&quot;"));
    // Nothing online: no link, script, stylesheet or namespace URL.
    for online in [
        "http://", "https://", "<script", "<link", "src=", "@import", "url(",
    ] {
        assert!(!page.contains(online), "{online} in the page");
    }
}
