//! Test certificates made with rcgen: a CA, a server certificate for localhost and 127.0.0.1 (also good as a
//! client certificate, as a member of a replicated coordinator presents its own to the others), and a client
//! certificate, written as PEM files: what the coordinator's TLS tests and the end-to-end tests serve and trust.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, as PEM files in `dir`.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// Makes the certificates and writes them into `dir` (which must exist).
pub fn pki(dir: &Path) -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "sweep test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let issue = |names: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.extended_key_usages = usages;
        (p.signed_by(&key, &ca).unwrap().pem(), key.serialize_pem())
    };
    let (sc, sk) = issue(
        vec!["localhost".into(), "127.0.0.1".into()],
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    );
    let (cc, ck) = issue(
        vec!["worker-1".into()],
        vec![ExtendedKeyUsagePurpose::ClientAuth],
    );
    let files = Pki {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    };
    for (path, text) in [
        (&files.ca, ca.pem()),
        (&files.server_cert, sc),
        (&files.server_key, sk),
        (&files.client_cert, cc),
        (&files.client_key, ck),
    ] {
        std::fs::write(path, text).unwrap();
    }
    files
}
