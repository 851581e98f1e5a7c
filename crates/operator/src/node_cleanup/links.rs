//! The node's links over rtnetlink: list them (name, kind, the bridge each is a port of) and
//! delete one bridge by index once its name has been checked again.

use futures::TryStreamExt;
use rtnetlink::Handle;
use rtnetlink::packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};

use super::plan::Link;

/// A connection to the kernel's routing socket; its task runs on the current runtime.
pub fn connect() -> std::io::Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection()?;
    tokio::spawn(connection);
    Ok(handle)
}

fn link_of(message: &LinkMessage) -> Link {
    let mut link = Link {
        index: message.header.index,
        name: String::new(),
        is_bridge: false,
        controller: None,
    };
    for attribute in &message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => link.name = name.clone(),
            LinkAttribute::Controller(index) => link.controller = Some(*index),
            LinkAttribute::LinkInfo(infos) => {
                link.is_bridge = infos
                    .iter()
                    .any(|i| matches!(i, LinkInfo::Kind(InfoKind::Bridge)));
            }
            _ => {}
        }
    }
    link
}

/// Every link of the node's network namespace.
pub async fn list(handle: &Handle) -> Result<Vec<Link>, rtnetlink::Error> {
    let messages: Vec<LinkMessage> = handle.link().get().execute().try_collect().await?;
    Ok(messages.iter().map(link_of).collect())
}

/// Deletes the bridge `name` at `index` if the link there still has that name, is still a
/// bridge and still has no port; whether it did. Between the plan and this a Pod may have
/// joined it: the links are listed again first.
pub async fn delete_unused_bridge(handle: &Handle, index: u32, name: &str) -> Result<bool, rtnetlink::Error> {
    let links = list(handle).await?;
    let still = links
        .iter()
        .any(|l| l.index == index && l.name == name && l.is_bridge);
    let has_port = links.iter().any(|l| l.controller == Some(index));
    if !still || has_port {
        return Ok(false);
    }
    handle.link().del(index).execute().await?;
    Ok(true)
}
