//! dns: turns a host name into addresses, once, for policy to classify.
//!
//! Pinned answers (`[resolver.hosts]`) are answered here; everything else
//! goes to hickory-resolver. Must not classify or decide: the caller hands
//! the answers to `policy::decide_addresses`, and dials only what that
//! returns, so a name is never resolved twice (no rebinding window).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver as Hickory, TokioResolver};

use crate::config::{Nameservers, ResolverSettings};
use crate::policy::Resolution;

/// Total time a lookup may take before it counts as failed.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(8);

/// Why the resolver could not be set up (the system configuration is
/// unreadable, say).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct ResolverError(#[from] hickory_resolver::net::NetError);

pub(crate) struct Resolver {
    pinned: HashMap<String, Vec<IpAddr>>,
    hickory: TokioResolver,
}

impl Resolver {
    pub(crate) fn new(settings: &ResolverSettings) -> Result<Resolver, ResolverError> {
        let mut builder = match &settings.nameservers {
            Nameservers::System => Hickory::builder_tokio()?,
            Nameservers::List(list) => {
                let servers = list.iter().map(name_server).collect();
                Hickory::builder_with_config(
                    ResolverConfig::from_name_servers(servers),
                    TokioRuntimeProvider::default(),
                )
            }
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        // sluice's own pins are [resolver.hosts]; the host's /etc/hosts is
        // not the task's to use.
        opts.use_hosts_file = ResolveHosts::Never;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.timeout = Duration::from_secs(3);
        opts.attempts = 2;
        Ok(Resolver {
            pinned: settings.hosts.clone(),
            hickory: builder.build()?,
        })
    }

    /// Resolves a normalised host name (never an IP literal).
    pub(crate) async fn resolve(&self, name: &str) -> Resolution {
        if let Some(ips) = self.pinned.get(name) {
            return Resolution::Resolved(ips.clone());
        }
        // A trailing dot makes the name absolute: no search domains.
        let fqdn = format!("{name}.");
        match tokio::time::timeout(LOOKUP_TIMEOUT, self.hickory.lookup_ip(fqdn)).await {
            Ok(Ok(answer)) => Resolution::Resolved(answer.iter().collect()),
            Ok(Err(e)) if e.is_nx_domain() || e.is_no_records_found() => {
                Resolution::Failed(format!("{name} does not resolve (no such name)"))
            }
            Ok(Err(e)) => Resolution::Failed(format!("{name} did not resolve: {e}")),
            Err(_) => Resolution::Failed(format!(
                "{name} did not resolve within {}s",
                LOOKUP_TIMEOUT.as_secs()
            )),
        }
    }
}

fn name_server(addr: &SocketAddr) -> NameServerConfig {
    let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
    for c in &mut ns.connections {
        c.port = addr.port();
    }
    ns
}
