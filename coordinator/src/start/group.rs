//! Starting a member of a replicated group: which URLs found the group and which one is this member, that
//! a group keeps one URL scheme, which CA a member trusts for the others, and how a new member asks the
//! group to let it in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tonic::transport::ClientTlsConfig;
use tracing::warn;

use super::{
    bad_data, bind, dashboard, serve_security, Body, GroupOptions, Listen, Member, Membership,
    Options, Running, Security, StartError, DEFAULT_ELECTION_MS, MAX_MEMBERS,
};
use crate::grpc::replication::{carrier, ReplicationApi};
use crate::grpc::Backend;
use crate::member::{self, Leadership, LogStore, MemberError};
use crate::replica::{self, MemberConfig};
use crate::server;
use crate::store::{Store, StoreMachine};

/// A member of a replicated group, founding it or joining it, over the store, log and snapshots in its directory.
pub(super) async fn start_member(o: Options, group: GroupOptions) -> Result<Running, StartError> {
    let Some(listen) = o.listen else {
        return Err(StartError::NoListenAddress);
    };
    // Founding: this member's id and the founding URLs; joining: whom to ask, and the URL to be added at.
    let founding = match &group.membership {
        Membership::Join { urls, advertise } => Err((urls.clone(), advertise.clone())),
        Membership::Found { peers, id } => {
            let urls = peer_urls(peers)?;
            let listen_text = match &listen {
                Listen::Addr(a) => a.clone(),
                Listen::Bound(l) => l.local_addr()?.to_string(),
            };
            let id = own_id(&urls, *id, &listen_text)?;
            if urls.len() % 2 == 0 {
                warn!(
                    members = urls.len(),
                    "an even number of members tolerates no more lost members than one fewer would"
                );
            }
            Ok((id, urls))
        }
    };
    let peer_tls = PeerTls::from_options(&o.security, &group)?;
    let tls = peer_tls.is_some();
    for url in founding.iter().flat_map(|(_, urls)| urls.values()) {
        check_scheme("--peers", url, tls)?;
    }
    let security = serve_security(&o.security)?;
    // Members call each other with an admin token when the group has token files.
    let token = match &o.security.admin_token_file {
        Some(file) => Some(
            sweep_client::read_token_file(file).map_err(|e| StartError::Group(e.to_string()))?,
        ),
        None => None,
    };
    let data = o.data.clone();
    let bad = |e: MemberError| bad_data(&data, e);
    let store = Arc::new(Store::open(&data).map_err(|e| bad(e.into()))?);
    let listener = bind(listen).await?;
    let addr = listener.local_addr()?;
    let (id, log, started_with) = match founding {
        Ok((id, urls)) => {
            let log = member::open_log(&data, id, Some(&urls), &store).map_err(bad)?;
            (id, log, urls)
        }
        Err((urls, advertise)) => {
            join(
                &data,
                &urls,
                advertise.as_deref(),
                &o.security,
                peer_tls.as_ref(),
                &store,
                addr,
            )
            .await?
        }
    };
    // The log's membership, once it has one, is the group: the options only found it or join it.
    let urls = match log.members().addresses.is_empty() {
        true => started_with,
        false => log.members().addresses.clone(),
    };
    // A group keeps the scheme it was founded with: a member restarted with a certificate in a group at
    // http:// URLs (or without one in a group at https:// URLs) could neither call the others nor be called.
    if let Some((member, url)) = urls
        .iter()
        .find(|(_, u)| !u.is_empty() && member::serves_tls(u) != tls)
    {
        return Err(StartError::Group(format!(
            "the group's log names member {member} at `{url}`, but this member was started {} --tls-cert: a \
             group keeps the scheme it was founded with (all https:// with --tls-cert, or all http:// without)",
            if tls { "with" } else { "without" }
        )));
    }
    let files = member::snapshot_files(&data).map_err(bad)?;
    let machine = StoreMachine::open(store.clone(), files.clone()).map_err(|e| bad(e.into()))?;
    let peers = urls
        .iter()
        .filter(|(&p, _)| p != id)
        .map(|(&p, u)| (p, u.clone()))
        .collect();
    // A consensus tick: elections after 10 to 20 silent ticks, heartbeats every 2.
    let tick = Duration::from_millis(group.election_ms.unwrap_or(DEFAULT_ELECTION_MS) / 10);
    let config = MemberConfig::new(id, peers, tick);
    let election_timeout = config.election_timeout();
    let senders = carrier(token, peer_tls.map(|t| t.config), files.clone());
    let (handle, inbox) =
        replica::start(config, log, machine, senders).map_err(StartError::Member)?;
    let leadership = Leadership::new(id, handle.clone(), urls.clone(), election_timeout);
    let (stop_leading, stop_rx) = watch::channel(false);
    let run = tokio::spawn(leadership.clone().run(store.clone(), o.config, stop_rx));
    if security.auth.is_none() && !addr.ip().is_loopback() {
        warn!(%addr, "no token files: anyone who reaches this address may submit and run jobs, or pose as a member");
    }
    let dashboard = match dashboard(o.http.as_deref(), Backend::Member(leadership.clone())).await {
        Ok(d) => d,
        Err(e) => {
            let _ = stop_leading.send(true);
            let _ = run.await;
            handle.stop().await;
            return Err(e);
        }
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = handle.clone();
    let server = tokio::spawn(async move {
        let served = server::serve_member(
            listener,
            leadership,
            ReplicationApi::new(inbox, files).into_server(),
            security,
            async {
                let _ = stopped.await;
                // The coordinator stops first, committing what it holds through the other members, so the
                // member and its server must still run meanwhile.
                let _ = stop_leading.send(true);
                let _ = tokio::time::timeout(Duration::from_secs(30), run).await;
            },
        )
        .await;
        serving.stop().await;
        served
    });
    Ok(Running {
        addr: Some(addr),
        dashboard,
        body: Body::Member(Member {
            id,
            urls,
            handle,
            store,
            stop,
            server,
        }),
    })
}

/// A member's URL as given to `flag`, checked: http://HOST:PORT (https:// with TLS), without a trailing slash.
fn member_url(flag: &str, raw: &str) -> Result<String, StartError> {
    sweep_proto::member_url(raw).map_err(|e| StartError::Group(format!("{flag}: `{raw}` {e}")))
}

/// Refuses a member URL given to `flag` whose scheme does not match this member's TLS (`tls`: it serves with a
/// certificate). Members serve what they are called with: plain gRPC at http://, TLS only at https://.
fn check_scheme(flag: &str, url: &str, tls: bool) -> Result<(), StartError> {
    match (tls, member::serves_tls(url)) {
        (true, false) => Err(StartError::Group(format!(
            "{flag}: `{url}` is http://, but with --tls-cert the members serve TLS only: give their https:// URLs"
        ))),
        (false, true) => Err(StartError::Group(format!(
            "{flag}: `{url}` is https://: give --tls-cert and --tls-key, so that this member serves TLS, and \
             --peer-tls-ca (or --tls-client-ca), the CA that signed the other members' certificates"
        ))),
        _ => Ok(()),
    }
}

/// How this member calls the other members over TLS (when it serves TLS): it trusts the peer CA (default the
/// client CA) and presents its own certificate as its client identity. Read and checked once, before anything
/// starts.
struct PeerTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// For the consensus senders (`carrier`).
    config: ClientTlsConfig,
}

impl PeerTls {
    /// `None` without TLS (the members speak plain gRPC).
    fn from_options(s: &Security, g: &GroupOptions) -> Result<Option<PeerTls>, StartError> {
        let Some(tls) = &s.tls else {
            return Ok(None);
        };
        let (ca, flag) = match (&g.peer_tls_ca, &tls.client_ca) {
            (Some(ca), _) => (ca, "--peer-tls-ca"),
            (None, Some(ca)) => (ca, "--tls-client-ca"),
            (None, None) => {
                return Err(StartError::Group(
                    "--tls-cert with --peers or --join: give --peer-tls-ca FILE, the CA certificate that signed \
                     the other members' certificates (the members call each other over TLS)"
                        .into(),
                ))
            }
        };
        sweep_client::tls_config(ca, None)
            .map_err(|e| StartError::Group(format!("{flag}: {e}")))?;
        let config = sweep_client::tls_config(ca, Some((&tls.cert, &tls.key)))
            .map_err(|e| StartError::Group(format!("--tls-cert and --tls-key: {e}")))?;
        Ok(Some(PeerTls {
            ca: ca.clone(),
            cert: tls.cert.clone(),
            key: tls.key.clone(),
            config,
        }))
    }
}

/// The founding members by id, checked: URLs with a scheme and a port, none twice, at most [`MAX_MEMBERS`].
fn peer_urls(peers: &[String]) -> Result<BTreeMap<u64, String>, StartError> {
    let mut urls = BTreeMap::new();
    for (i, raw) in peers.iter().enumerate() {
        let url = member_url("--peers", raw)?;
        if urls.values().any(|u| *u == url) {
            return Err(StartError::Group(format!("--peers names {url} twice")));
        }
        urls.insert(i as u64 + 1, url);
    }
    if urls.len() > MAX_MEMBERS {
        return Err(StartError::Group(format!(
            "--peers names {} members; at most {MAX_MEMBERS}",
            urls.len()
        )));
    }
    Ok(urls)
}

/// This member's id: the one given, else the founding member whose host and port are the listen address.
fn own_id(urls: &BTreeMap<u64, String>, id: Option<u64>, listen: &str) -> Result<u64, StartError> {
    if let Some(id) = id {
        if !urls.contains_key(&id) {
            return Err(StartError::Group(format!(
                "--id {id}: --peers names only {} members",
                urls.len()
            )));
        }
        return Ok(id);
    }
    let found: Vec<u64> = urls
        .iter()
        .filter(|(_, u)| {
            let authority = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"));
            authority == Some(listen)
        })
        .map(|(&id, _)| id)
        .collect();
    match found.as_slice() {
        [id] => Ok(*id),
        _ => Err(StartError::Group(format!(
            "no member of --peers is at --listen {listen}: give --id N (this member's place in --peers, from 1)"
        ))),
    }
}

/// A joining member's id, its consensus log and the members' URLs. A directory that is already a member's goes
/// on as that member (asking the group for the members again only while it has not caught up); a new one asks
/// the group to add it at its URL.
async fn join(
    data: &Path,
    list: &str,
    advertise: Option<&str>,
    security: &Security,
    peer_tls: Option<&PeerTls>,
    store: &Store,
    addr: std::net::SocketAddr,
) -> Result<(u64, LogStore, BTreeMap<u64, String>), StartError> {
    let bad = |e: MemberError| bad_data(data, e);
    let url = match advertise {
        Some(u) => member_url("--advertise", u)?,
        None if peer_tls.is_some() => format!("https://{addr}"),
        None => format!("http://{addr}"),
    };
    check_scheme("--advertise", &url, peer_tls.is_some())?;
    // This member's own address is not asked: it listens already but serves nothing before it joins.
    let others: Vec<&str> = list
        .split(',')
        .map(|u| u.trim())
        .filter(|u| !u.is_empty() && u.trim_end_matches('/') != url)
        .collect();
    if others.is_empty() {
        return Err(StartError::Group(
            "--join names no member of the running group (only this member's own URL, or nothing)"
                .into(),
        ));
    }
    for other in &others {
        check_scheme("--join", other, peer_tls.is_some())?;
    }
    let list = others.join(",");
    let ask = || ask_to_join(security, peer_tls, &list, &url);
    if let Some(id) = member::member_of(data) {
        let log = member::open_log(data, id, None, store).map_err(bad)?;
        if log.is_initialized() {
            return Ok((id, log, BTreeMap::new()));
        }
        let (asked, urls) = ask().await?;
        if asked != id {
            return Err(StartError::Group(format!(
                "{} is the directory of member {id}, but the group has member {asked} at {url}: give this \
                 member its own --advertise URL, or an empty --data directory",
                data.display()
            )));
        }
        return Ok((id, log, urls));
    }
    let (id, urls) = ask().await?;
    let log = member::open_log(data, id, None, store).map_err(bad)?;
    Ok((id, log, urls))
}

/// Asks the group at `list` to add a member at `url`: the id it got and every member's URL. Over TLS with
/// `peer_tls`, as the members call each other.
async fn ask_to_join(
    security: &Security,
    peer_tls: Option<&PeerTls>,
    list: &str,
    url: &str,
) -> Result<(u64, BTreeMap<u64, String>), StartError> {
    let client_security = sweep_client::ClientSecurity {
        token_file: security.admin_token_file.clone(),
        tls_ca: peer_tls.map(|t| t.ca.clone()),
        tls_cert: peer_tls.map(|t| t.cert.clone()),
        tls_key: peer_tls.map(|t| t.key.clone()),
        ..Default::default()
    };
    let mut client = sweep_client::Client::connect(list, &client_security)
        .await
        .map_err(|source| StartError::Unreachable {
            list: list.to_string(),
            source,
        })?;
    let reply = client
        .add_member(url)
        .await
        .map_err(|source| StartError::NotAdded {
            list: list.to_string(),
            url: url.to_string(),
            source,
        })?;
    let urls = reply.members.into_iter().map(|m| (m.id, m.url)).collect();
    tracing::info!(id = reply.id, %url, "added to the group");
    Ok((reply.id, urls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(peers: &[&str]) -> BTreeMap<u64, String> {
        peer_urls(&peers.iter().map(|p| p.to_string()).collect::<Vec<_>>()).expect("valid peers")
    }

    #[test]
    fn a_founding_member_is_found_by_its_listen_address_or_its_id() {
        let urls = found(&["http://a:1", "http://b:2/", " http://c:3"]);
        assert_eq!(urls[&2], "http://b:2", "one spelling per member");
        assert_eq!(own_id(&urls, None, "c:3").expect("by address"), 3);
        assert_eq!(own_id(&urls, Some(1), "c:3").expect("by id"), 1);
        let err = own_id(&urls, Some(4), "a:1").expect_err("no fourth member");
        assert!(err.to_string().contains("names only 3 members"), "{err}");
        let err = own_id(&urls, None, "d:4").expect_err("not among them");
        assert!(err.to_string().contains("give --id N"), "{err}");
        assert!(err.is_usage());
    }

    #[test]
    fn peers_named_twice_or_without_a_port_are_refused() {
        let twice = peer_urls(&["http://a:1".into(), "http://a:1/".into()]).expect_err("twice");
        assert!(
            twice.to_string().contains("names http://a:1 twice"),
            "{twice}"
        );
        let no_port = peer_urls(&["http://a".into()]).expect_err("no port");
        assert!(
            no_port.to_string().starts_with("--peers: `http://a`"),
            "{no_port}"
        );
        let many: Vec<String> = (1..=65).map(|p| format!("http://a:{p}")).collect();
        let err = peer_urls(&many).expect_err("too many");
        assert!(err.to_string().contains("at most 64"), "{err}");
    }

    #[test]
    fn a_member_url_must_have_the_scheme_of_the_members_tls() {
        assert!(check_scheme("--peers", "https://a:1", true).is_ok());
        assert!(check_scheme("--peers", "http://a:1", false).is_ok());
        let err = check_scheme("--join", "http://a:1", true).expect_err("plain with TLS");
        assert!(
            err.to_string()
                .starts_with("--join: `http://a:1` is http://"),
            "{err}"
        );
        let err =
            check_scheme("--peers", "https://a:1", false).expect_err("TLS without a certificate");
        assert!(
            err.to_string().contains("give --tls-cert and --tls-key"),
            "{err}"
        );
    }
}
