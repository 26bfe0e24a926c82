//! The committed data set manifest (`datasets.toml`) names a public origin for every data set,
//! each at a fixed version: a lone clone can fetch everything the experiments read, and a
//! re-pushed branch upstream cannot change what a URL serves without the checksum refusing it.

use std::path::Path;

use memwall_core::datasets::Manifest;

fn manifest() -> Manifest {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    Manifest::load(&repo)
        .expect("datasets.toml parses")
        .expect("datasets.toml is at the repository's root")
}

/// `%XX` escapes decoded (the manifest's URLs percent-encode spaces, parentheses and commas).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).expect("ascii escape");
            out.push(u8::from_str_radix(hex, 16).expect("two hexadecimal digits after %"));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8 file name")
}

/// The upstream file name of one of our rematerialization graph names: Moccasin's data folder
/// writes `VGG16_256_224_224_3_train_nx.json` as `VGG16 (MLSys)_256_(224, 224, 3)_train_nx.json`;
/// the random layered graphs keep their names.
fn upstream_name(ours: &str) -> String {
    let Some(stem) = ours.strip_suffix("_nx.json") else {
        return ours.to_string();
    };
    let parts: Vec<&str> = stem.rsplitn(6, '_').collect();
    // rsplitn: [kind, c, w, h, batch, model]
    let [kind, c, w, h, batch, model] = parts[..] else {
        panic!("graph name `{ours}` is not <model>_<batch>_<h>_<w>_<c>_<kind>_nx.json");
    };
    format!("{model} (MLSys)_{batch}_({h}, {w}, {c})_{kind}_nx.json")
}

#[test]
fn every_data_set_has_a_public_origin_at_a_pinned_version() {
    let m = manifest();
    assert!(m.datasets.len() >= 13, "the 13 data sets the studies read");
    for d in &m.datasets {
        let url = d
            .url
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no `url`: a lone clone cannot fetch it", d.path));
        assert!(
            url.starts_with("https://"),
            "{}: {url} is not HTTPS",
            d.path
        );
        if let Some(rest) = url.strip_prefix("https://raw.githubusercontent.com/") {
            // owner/repo/<commit>/path: a 40-digit commit, never a branch name.
            let commit = rest.split('/').nth(2).unwrap_or("");
            assert!(
                commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
                "{}: {url} names `{commit}`, not a pinned commit",
                d.path
            );
        }
    }
}

#[test]
fn each_graph_url_names_the_upstream_file_of_the_same_graph() {
    let m = manifest();
    let graphs: Vec<_> = m
        .datasets
        .iter()
        .filter(|d| d.path.starts_with("remat-graphs/"))
        .collect();
    assert_eq!(graphs.len(), 12, "the Checkmate and Moccasin graphs");
    for d in graphs {
        let ours = d.path.rsplit('/').next().unwrap();
        let url = d.url.as_deref().unwrap();
        let theirs = percent_decode(url.rsplit('/').next().unwrap());
        let expect = if ours.starts_with("random_layered_") {
            ours.to_string()
        } else {
            upstream_name(ours)
        };
        assert_eq!(theirs, expect, "{}: the URL serves another file", d.path);
        assert!(!d.prefix, "{}: a graph is a whole file", d.path);
    }
}

#[test]
fn the_name_mapping_is_moccasins() {
    assert_eq!(
        upstream_name("fcn_8_vgg_32_416_608_3_test_nx.json"),
        "fcn_8_vgg (MLSys)_32_(416, 608, 3)_test_nx.json"
    );
    assert_eq!(
        percent_decode("VGG16%20%28MLSys%29_256_%28224%2C%20224%2C%203%29_train_nx.json"),
        "VGG16 (MLSys)_256_(224, 224, 3)_train_nx.json"
    );
}
