//! isnode's HTTP/1 front: connections with deadlines and a cap ([`conns`]), TLS from PEM
//! files ([`tls`]), the request limits and JSON errors every route answers with ([`limits`],
//! [`error`]), and `sendfile` of response bytes that lie in a file's view ([`sendfile`]). It knows no isnode type but the wire's error body; the API above routes.

pub mod conns;
pub mod error;
pub mod limits;
pub mod sendfile;
pub mod tls;
