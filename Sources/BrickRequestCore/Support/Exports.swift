// HTTPRequest, HTTPResponse and HTTPFields are BrickRequest's currency types: re-export them so
// `import BrickRequest` is enough to name a method (`.get`), a status (`.ok`) or a field (`.accept`).
@_exported public import HTTPTypes
