//! Field-path parsing, then every way a parsed path is used on objects.
#![no_main]

use mrguard_policy::admission::fieldpath::FieldPath;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(path) = FieldPath::parse(text) else {
        return;
    };
    assert_eq!(path.as_str(), text);
    assert!(!path.segments().is_empty());
    let object = serde_json::json!({
        "metadata": {"name": "n", "labels": {"team": "a", "a.b/c": "d"}},
        "spec": {"forProvider": {"region": "us-east-1", "subnets": [{"availabilityZone": "a"}, {"x": null}], "0": [1, 2]}}
    });
    let selected = path.select(&object);
    if path.is_concrete() {
        assert!(
            selected.len() <= 1,
            "a concrete path selects at most one value"
        );
        assert_eq!(path.get(&object), selected.first().map(|(_, v)| *v));
        let mut copy = object.clone();
        let _ = path.get_or_create_object(&mut copy);
    }
});
