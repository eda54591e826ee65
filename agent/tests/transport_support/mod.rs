//! Helpers shared by the transport tests: throwaway PKI directories.
#![allow(dead_code)]

use std::path::PathBuf;

use shoal::identity::pki::{self, Identity};

/// A fresh PKI directory holding a new CA, removed on drop.
pub struct TestPki {
    pub dir: PathBuf,
}

impl TestPki {
    pub fn new(tag: &str) -> TestPki {
        let dir = std::env::temp_dir().join(format!(
            "shoal-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        pki::init(&dir).expect("pki init");
        TestPki { dir }
    }

    /// Loads (issuing on first use, as a node) the identity `name`.
    pub fn identity(&self, name: &str) -> Identity {
        self.identity_as(name, pki::Role::Node)
    }

    /// Loads (issuing on first use with `role`) the identity `name`.
    pub fn identity_as(&self, name: &str, role: pki::Role) -> Identity {
        pki::load_identity(&self.dir, name, pki::SelfIssue::As(role)).expect("load identity")
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
