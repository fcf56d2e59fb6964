/// Chooses the session. Make your own brick to send a group of endpoints through one session:
///
/// ```swift
/// protocol APISessionRequestType: SessionRequestType {}
/// extension APISessionRequestType { var session: Session { Session.api } }
/// ```
public protocol SessionRequestType: RequestType {}
