@_exported import BrickRequest
