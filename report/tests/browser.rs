//! Every committed `reports/*/index.html` rendered in headless Chromium at 1280 x 900 px: no
//! console error or uncaught exception, no image or figure that fails to load or is empty, no
//! table wider than the window, no horizontal scrolling of the page, and the whole "Results at
//! a glance" block within the first 900 px.
//!
//! Needs Debian's `chromium` package (`scripts/setup.sh` installs it, as `.ci/run` does),
//! or `MEMWALL_CHROMIUM` set to a Chromium or Chrome binary. Without one the test fails and
//! says how to install it (it never passes without looking at a page).
//!
//! How a page is checked without a DevTools client: the page is copied into a temporary folder
//! with a checking script injected at the top of its `<head>`. The script records uncaught
//! errors, failed resource loads and `console.error` calls from the start, and after the load
//! event measures the images, figures and tables and writes its verdict (JSON) into the DOM,
//! which `chromium --headless --dump-dom` prints.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The window the pages must fit: a 1280-px-wide laptop screen.
const WINDOW: (u32, u32) = (1280, 900);
const VERDICT: &str = "MEMWALL-VERDICT ";

/// The checking script (see the module comment).
const CHECKER: &str = r#"<script>
(function () {
  const problems = [];
  window.addEventListener('error', function (e) {
    const t = e.target;
    if (t && t !== window && (t.src || t.href)) {
      problems.push('resource failed to load: ' + (t.src || t.href));
    } else {
      problems.push('uncaught error: ' + e.message);
    }
  }, true);
  const consoleError = console.error;
  console.error = function () {
    problems.push('console.error: ' + Array.from(arguments).join(' '));
    consoleError.apply(console, arguments);
  };
  window.addEventListener('load', function () {
    setTimeout(function () {
      const vw = document.documentElement.clientWidth;
      for (const img of document.images) {
        if (!img.complete || img.naturalWidth === 0) {
          problems.push('image missing or empty: ' + img.getAttribute('src'));
        }
      }
      for (const fig of document.querySelectorAll('figure')) {
        const pic = fig.querySelector('svg, img, object');
        const r = pic ? pic.getBoundingClientRect() : null;
        if (!r || r.width < 50 || r.height < 50) {
          problems.push('figure "' + fig.id + '" has no visible image');
        }
      }
      document.querySelectorAll('table').forEach(function (t, i) {
        const r = t.getBoundingClientRect();
        // A table that fits only by scrolling inside its own box or a wrapper's is too wide too.
        const inner = Math.max(t.scrollWidth - t.clientWidth,
          t.parentElement.scrollWidth - t.parentElement.clientWidth);
        if (r.right > vw + 0.5 || inner > 1) {
          const cap = t.caption ? t.caption.textContent : '';
          problems.push('table ' + (t.id || i) + ' (' + t.className + ', "' + cap + '") is ' +
            Math.round(r.width + Math.max(inner, 0)) + ' px wide (' + Math.max(inner, 0) +
            ' px of it hidden behind a scroll bar); its right edge at ' +
            Math.round(r.right) + ' px, the window is ' + vw + ' px');
        }
      });
      // The reader's first screen (1280 x 900) holds the whole "Results at a glance" block.
      const glance = document.getElementById('glance');
      if (!glance) {
        problems.push('no "Results at a glance" block (#glance)');
      } else {
        const g = glance.getBoundingClientRect();
        if (g.bottom > 900) {
          problems.push('the "Results at a glance" block ends at ' + Math.round(g.bottom) +
            ' px, below the first 900 px screen');
        }
      }
      if (document.documentElement.scrollWidth > vw) {
        problems.push('the page scrolls horizontally: ' + document.documentElement.scrollWidth +
          ' px of content in a ' + vw + ' px window');
      }
      const out = document.createElement('pre');
      // the marker is split here so that this script's own text never matches it
      out.textContent = 'MEMWALL-' + 'VERDICT ' + JSON.stringify({
        viewport: vw, tables: document.querySelectorAll('table').length,
        figures: document.querySelectorAll('figure').length, problems: problems });
      document.body.appendChild(out);
    }, 0);
  });
})();
</script>"#;

/// What the checking script reports for one page.
#[derive(Debug, serde::Deserialize)]
struct Verdict {
    viewport: u32,
    tables: usize,
    figures: usize,
    problems: Vec<String>,
}

/// The Chromium binary: `MEMWALL_CHROMIUM`, or `chromium` / `chromium-browser` /
/// `google-chrome` on the PATH.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("MEMWALL_CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "headless Chromium is needed to check the HTML reports and none was found: run \
         `scripts/setup.sh` (it installs what `just test` needs), or Debian's package with \
         `sudo apt-get install -y chromium`, or set MEMWALL_CHROMIUM to a Chromium or Chrome \
         binary"
    );
}

/// Copies the report folder `src` to `dst` (the page with its `figures/`).
fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// Renders `html` (a page in the folder `dir`, whose relative links resolve there) with the
/// checker injected, and returns the verdict and Chromium's stderr.
fn check_page(dir: &Path, html: &str, label: &str) -> (Verdict, String) {
    let head = html
        .find("<head>")
        .unwrap_or_else(|| panic!("{label}: no <head> in the page"));
    let at = head + "<head>".len();
    let page = format!("{}{CHECKER}{}", &html[..at], &html[at..]);
    let file = dir.join("memwall-browser-check.html");
    std::fs::write(&file, page).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let dom_file = profile.path().join("dom.html");
    let log_file = profile.path().join("chromium.log");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            // root in CI containers: Chromium's sandbox needs user namespaces it lacks there
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--allow-file-access-from-files",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            &format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            &format!("--user-data-dir={}", profile.path().display()),
            "--dump-dom",
        ])
        .arg(format!("file://{}", file.display()))
        // files, not pipes: a page's DOM is larger than a pipe's buffer
        .stdout(std::fs::File::create(&dom_file).unwrap())
        .stderr(std::fs::File::create(&log_file).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{label}: starting Chromium: {e}"));
    // Chromium that hangs fails the test after a minute instead of blocking it.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{label}: Chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let dom = String::from_utf8_lossy(&std::fs::read(&dom_file).unwrap()).to_string();
    let stderr = String::from_utf8_lossy(&std::fs::read(&log_file).unwrap()).to_string();
    let line = dom
        .lines()
        .rev()
        .find_map(|l| l.split_once(VERDICT).map(|(_, v)| v.to_string()))
        .unwrap_or_else(|| {
            panic!(
                "{label}: the checker left no verdict in the page (did it load?); Chromium said:\n{stderr}"
            )
        });
    let line = line
        .split("</pre>")
        .next()
        .unwrap()
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let verdict: Verdict = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{label}: unreadable verdict {line}: {e}"));
    (verdict, stderr)
}

/// Console messages Chromium logged as errors or uncaught exceptions (`--enable-logging`).
fn console_errors(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE") && (l.contains("ERROR") || l.contains("Uncaught")))
        .map(str::to_string)
        .collect()
}

#[test]
fn committed_reports_read_well_in_chromium_at_1280_px() {
    let reports = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("index.html").is_file())
        .collect();
    pages.sort();
    assert!(
        pages.len() >= 10,
        "expected the committed reports under {}, found {}",
        reports.display(),
        pages.len()
    );
    let mut failures = Vec::new();
    for dir in &pages {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let tmp = tempfile::tempdir().unwrap();
        copy_dir(dir, tmp.path());
        let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
        let (v, stderr) = check_page(tmp.path(), &html, &name);
        // the layout width: the window less a vertical scroll bar (15 px in Chromium)
        assert!(
            v.viewport <= WINDOW.0 && v.viewport + 20 >= WINDOW.0,
            "{name}: the page is laid out {} px wide in a {} px window",
            v.viewport,
            WINDOW.0
        );
        assert!(v.tables > 0, "{name}: no table rendered");
        // Every figure of report.md is a figure of the page, and its SVG file exists.
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let linked: Vec<&str> = md
            .split("](figures/")
            .skip(1)
            .filter_map(|s| s.split(')').next())
            .collect();
        assert_eq!(
            v.figures,
            linked.len(),
            "{name}: figures in the page vs report.md"
        );
        for f in &linked {
            if !dir.join("figures").join(f).is_file() {
                failures.push(format!(
                    "{name}: report.md links figures/{f}, which is missing"
                ));
            }
        }
        failures.extend(v.problems.iter().map(|p| format!("{name}: {p}")));
        failures.extend(
            console_errors(&stderr)
                .into_iter()
                .map(|l| format!("{name}: {l}")),
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The checker finds what it looks for: a page with a table too wide for the window, an image
/// that does not exist, an empty figure and a console error gets all four reported.
#[test]
fn the_checker_reports_a_wide_table_a_missing_image_and_a_console_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cells: String = (0..40)
        .map(|i| format!("<td>column {i} with text</td>"))
        .collect();
    let html = format!(
        "<!DOCTYPE html><html><head><title>bad</title></head><body>\
         <table class=\"results\" id=\"wide\"><tr>{cells}</tr></table>\
         <img src=\"figures/missing.svg\" alt=\"missing\">\
         <figure id=\"empty\"></figure>\
         <script>console.error('boom');</script></body></html>"
    );
    let (v, stderr) = check_page(tmp.path(), &html, "synthetic page");
    let all = v.problems.join("\n");
    assert!(all.contains("table wide"), "{all}");
    assert!(all.contains("missing.svg"), "{all}");
    assert!(all.contains("figure \"empty\""), "{all}");
    assert!(all.contains("console.error: boom"), "{all}\n{stderr}");
    assert!(all.contains("scrolls horizontally"), "{all}");
    assert!(all.contains("no \"Results at a glance\" block"), "{all}");
}
